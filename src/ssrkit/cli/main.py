"""The `ssrkit` command: one Typer app, one module per subcommand, all registered at the bottom of this file."""

from __future__ import annotations

import signal
import sys

from typing import Annotated

import typer

from .. import __version__
from ..errors import SsrkitError
from ..sandbox import install_signal_handlers, stopped
from . import env, examples, export, higher_order, image, inject, pool, report, reward, serve, show, solve, train, validate
from .common import Command, err_console, safe

app = typer.Typer(
    name="ssrkit",
    help="Self-play SWE-RL toolkit: inject bugs into real repositories, validate them, solve them, "
    "reward both roles and train the policy. Every stage reads and writes artifact directories.",
    rich_markup_mode="rich",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

def _version(value: bool) -> None:
    if value:
        print(f"ssrkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True, help="Print the version.",
    )] = False,
) -> None:
    """Self-play SWE-RL toolkit."""


def main(argv: list[str] | None = None) -> None:
    # before any thread: SIGTERM, SIGHUP and Ctrl-C stop every sandbox, the --jobs workers' too
    install_signal_handlers(sigint=True)
    try:
        app(args=argv, prog_name="ssrkit")
    except BaseException as e:
        signum = stopped()
        # typer turns Ctrl-C into `Exit(130) from KeyboardInterrupt`, and that into SystemExit(130)
        ctrl_c = isinstance(e, KeyboardInterrupt) or (isinstance(e, SystemExit) and e.code == 130 and isinstance(
            getattr(e.__context__, "__cause__", None), KeyboardInterrupt))
        if signum is not None or ctrl_c:
            err_console.print("[yellow]interrupted[/]")
            sys.exit(128 + (signum or signal.SIGINT))
        if isinstance(e, SsrkitError):
            err_console.print(f"[bold red]error:[/] {safe(str(e))}", highlight=False)
            sys.exit(2)
        raise


# -- registration: one line a command --------------------------------------------------------------
app.command("inject", epilog=inject.EPILOG, cls=Command)(inject.inject)
app.command("validate", epilog=validate.EPILOG, cls=Command)(validate.validate)
app.command("show", epilog=show.EPILOG, cls=Command)(show.show)
app.command("solve", epilog=solve.EPILOG, cls=Command)(solve.solve)
app.command("reward", epilog=reward.EPILOG, cls=Command)(reward.reward)
app.command("higher-order", epilog=higher_order.EPILOG, cls=Command)(higher_order.higher_order)
app.command("train", cls=Command)(train.train)
app.command("serve", cls=Command)(serve.serve)
app.command("report", epilog=report.EPILOG, cls=Command)(report.report)
app.command("export", epilog=export.EPILOG, cls=Command)(export.export)
app.add_typer(pool.pool_app, name="pool")
app.add_typer(examples.examples_app, name="examples")
app.add_typer(image.image_app, name="image")
app.add_typer(env.env_app, name="env")
