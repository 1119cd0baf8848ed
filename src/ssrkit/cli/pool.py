"""`ssrkit pool`: carry validated artifacts across self-play rounds."""

from __future__ import annotations

from pathlib import Path

import typer

from ..pool import close_round, round_artifacts, select_tasks
from .common import JsonOpt, console, print_json

pool_app = typer.Typer(help="The task pool of a run: select old tasks for a round, close a round.",
                       no_args_is_help=True, rich_markup_mode="rich")


@pool_app.command("select")
def select(
    run: Path = typer.Argument(..., help="Run directory.", show_default=False),
    round_no: int = typer.Option(..., "--round", "-r", min=1, help="The round being prepared."),
    old_ratio: float = typer.Option(0.5, "--old-ratio", help="Share of the round's tasks taken from the pool."),
    seed: int = typer.Option(0, "--seed"),
    as_json: bool = JsonOpt,
) -> None:
    """Copy pool artifacts into RUN/round-N/tasks/ to mix with the round's new injections."""
    n_new = sum(1 for a in round_artifacts(run, round_no, ("inject",))["inject"] if (a.validation or {}).get("valid"))
    chosen = select_tasks(run, round_no, n_new=n_new, old_ratio=old_ratio, seed=seed)
    if as_json:
        print_json([str(p) for p in chosen])
    else:
        console.print(f"round {round_no}: {n_new} new artifact(s), {len(chosen)} carried from the pool")


@pool_app.command("close")
def close(
    run: Path = typer.Argument(..., help="Run directory.", show_default=False),
    round_no: int = typer.Option(..., "--round", "-r", min=1, help="The round that finished."),
    retire_after: int = typer.Option(2, "--retire-after", min=1,
                                     help="Retire artifacts always or never solved in this many rounds."),
    as_json: bool = JsonOpt,
) -> None:
    """Add the round's valid artifacts to the pool, record solve rates, retire, append metrics.csv."""
    row = close_round(run, round_no, retire_after=retire_after)
    if as_json:
        print_json(row)
    else:
        console.print(f"round {round_no} closed: solve rate {row['solve_rate']}, pool {row['pool_size']} "
                      f"active, {row['pool_retired']} retired")
