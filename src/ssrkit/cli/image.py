"""`ssrkit image`: build Docker images for the docker sandbox backend (thin layer over `ssrkit.sandbox.image`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from ..sandbox import image as core
from ..store.source import DEFAULT_WORKDIR
from .common import Command, err_console, one_repo, safe

image_app = typer.Typer(
    name="image",
    help="Build Docker images for `--backend docker`: a base image made without a registry "
    "(debootstrap), and one image per repository snapshot (the repository at /testbed).",
    no_args_is_help=True,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)

def _log(msg: str) -> None:
    err_console.print(msg, highlight=False, markup=False)


BUILD_EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit image build ~/src/attrs[/]
  [cyan]ssrkit image build --repo . --tag attrs:snap1[/]
  [cyan]ssrkit image build . --base python:3.12-slim[/]     any image you already have
  [cyan]ssrkit validate runs/a/* --image "$(ssrkit image build . -q)"[/]
"""


@image_app.command("build", epilog=BUILD_EPILOG, cls=Command)
def build(
    repo: Annotated[Optional[Path], typer.Argument(
        help="Repository directory, copied as it is on disk (ignored files and .git included); or --repo.",
        show_default=False,
    )] = None,
    repo_opt: Annotated[Optional[Path], typer.Option(
        "--repo", help="The repository directory (the same as the REPO argument).", show_default=False,
    )] = None,
    tag: Annotated[Optional[str], typer.Option(
        "--tag", "-t", help="Image name \\[default: ssrkit/<dir>:<state fingerprint>].", show_default=False,
    )] = None,
    base: Annotated[str, typer.Option(
        "--base", help="Base image holding the toolchain (any local image).",
    )] = core.BASE_IMAGE,
    workdir: Annotated[str, typer.Option("--workdir",
                                         help="Where the repository goes in the image.")] = DEFAULT_WORKDIR,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the image name.")] = False,
) -> None:
    """Build an image of REPO: the base image + the repository at /testbed, installed in editable mode.

    The install runs `pip install --no-build-isolation --no-deps -e .` with no network: it is best effort,
    so dependencies must come with the base image. The image name is printed on stdout.
    """
    path = one_repo(repo, repo_opt)
    name = core.build_image(str(path), tag=tag, base=base, workdir=workdir, log=(lambda m: None) if quiet else _log)
    print(name)


BASE_EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit image base[/]
  [cyan]ssrkit image base --mirror http://deb.debian.org/debian --force[/]
"""


@image_app.command("base", epilog=BASE_EPILOG, cls=Command)
def base_cmd(
    tag: Annotated[str, typer.Option("--tag", "-t", help="Name of the base image.")] = core.BASE_IMAGE,
    suite: Annotated[str, typer.Option("--suite", help="Debian suite for debootstrap.")] = core.BASE_SUITE,
    mirror: Annotated[Optional[str], typer.Option(
        "--mirror", help="Debian mirror \\[default: the one apt uses].", show_default=False,
    )] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the image exists.")] = False,
) -> None:
    """Build the base image with debootstrap (needs root and `debootstrap`; about a minute; cached).

    Debian minbase with python3, pytest, coverage, pip, setuptools, git and procps, imported with
    `docker import`. Downloaded packages are cached in /var/cache/ssrkit/debootstrap.
    """
    print(core.build_base_image(tag, suite=suite, mirror=mirror, force=force, log=_log))


def main() -> None:  # `python -m ssrkit.cli.image ...` (the integrator registers `ssrkit image`)
    import sys

    from ..errors import SsrkitError

    try:
        image_app(prog_name="ssrkit image")
    except SsrkitError as e:
        err_console.print(f"[bold red]error:[/] {safe(str(e))}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
