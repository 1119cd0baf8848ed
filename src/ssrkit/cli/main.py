"""The `ssrkit` command: one Typer app, one module per subcommand."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from .. import __version__
from ..errors import SsrkitError
from .common import safe

app = typer.Typer(
    name="ssrkit",
    help="Self-play SWE-RL toolkit: inject bugs into real repositories, validate them, solve them, "
    "reward both roles and train the policy. Every stage reads and writes artifact directories.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

err_console = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        print(f"ssrkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Self-play SWE-RL toolkit."""


def _register() -> None:
    # Each module adds its command(s) to `app`; imported here so `ssrkit --help` lists them all.
    from . import commands  # noqa: F401


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        app(args=argv, prog_name="ssrkit")
    except SsrkitError as e:
        err_console.print(f"[bold red]error:[/] {safe(str(e))}", highlight=False)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted[/]")
        sys.exit(130)
    except SystemExit as e:
        # typer turns Ctrl-C into `Exit(130) from KeyboardInterrupt`, and that into SystemExit(130)
        if e.code == 130 and isinstance(getattr(e.__context__, "__cause__", None), KeyboardInterrupt):
            err_console.print("[yellow]interrupted[/]")
        raise
