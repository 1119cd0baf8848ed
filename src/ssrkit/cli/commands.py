"""Registration of every subcommand (one line each)."""

from __future__ import annotations

from . import examples, export, higher_order, image, inject, pool, report, reward, serve, show, solve, train, validate
from .main import app

app.command("inject", epilog=inject.EPILOG)(inject.inject)
app.command("validate", epilog=validate.EPILOG)(validate.validate)
app.command("show", epilog=show.EPILOG)(show.show)
app.command("solve", epilog=solve.EPILOG)(solve.solve)
app.command("reward", epilog=reward.EPILOG)(reward.reward)
app.command("higher-order", epilog=higher_order.EPILOG)(higher_order.higher_order)
app.command("train")(train.train)
app.command("serve")(serve.serve)
app.command("report", epilog=report.EPILOG)(report.report)
app.command("export", epilog=export.EPILOG)(export.export)
app.add_typer(pool.pool_app, name="pool")
app.add_typer(examples.examples_app, name="examples")
app.add_typer(image.image_app, name="image")
