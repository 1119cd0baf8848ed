"""Registration of every subcommand (one line each)."""

from __future__ import annotations

from .main import app

# Commands are registered here as they land, e.g.:
# app.command("validate")(validate.validate)
