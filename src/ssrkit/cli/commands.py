"""Registration of every subcommand (one line each)."""

from __future__ import annotations

from . import examples, export, inject, pool, report, show, validate
from .main import app

app.command("inject", epilog=inject.EPILOG)(inject.inject)
app.command("validate", epilog=validate.EPILOG)(validate.validate)
app.command("show", epilog=show.EPILOG)(show.show)
app.command("report", epilog=report.EPILOG)(report.report)
app.command("export", epilog=export.EPILOG)(export.export)
app.add_typer(pool.pool_app, name="pool")
app.add_typer(examples.examples_app, name="examples")
