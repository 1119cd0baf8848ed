"""Registration of every subcommand (one line each)."""

from __future__ import annotations

from . import show, validate
from .main import app

app.command("validate", epilog=validate.EPILOG)(validate.validate)
app.command("show", epilog=show.EPILOG)(show.show)
