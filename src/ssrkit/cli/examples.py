"""`ssrkit examples`: materialize the bundled example repositories as real git repositories."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from .. import examples as ex
from .common import Command, JsonOpt, console, print_json

examples_app = typer.Typer(help="The bundled example repositories (stored as patch series in examples/repos).",
                           no_args_is_help=True, rich_markup_mode="rich")

SrcOpt = typer.Option("--src", help="Where the patch series live.")
SRC = Path("examples/repos")


@examples_app.command("list", cls=Command)
def list_(src: Annotated[Path, SrcOpt] = SRC) -> None:
    """List the example repositories."""
    for name in ex.available(src):
        console.print(name)


@examples_app.command("materialize", epilog="[bold]Example[/]\n\n  [cyan]ssrkit examples materialize --dest build/repos[/]",
                       cls=Command)
def materialize(
    names: Annotated[Optional[List[str]], typer.Argument(
        help="Which repositories (default: all).", show_default=False,
    )] = None,
    dest: Annotated[Path, typer.Option("--dest", "-d", help="Directory to create them in.")] = Path("build/repos"),
    src: Annotated[Path, SrcOpt] = SRC,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Replay each example's history into DEST/<name> (deterministic commits; idempotent)."""
    paths = ex.materialize(src, dest, names or None)
    if as_json:
        print_json([str(p) for p in paths])
    else:
        for p in paths:
            console.print(f"{p}")
