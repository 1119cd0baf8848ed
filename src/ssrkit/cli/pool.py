"""`ssrkit pool`: carry validated artifacts across self-play rounds."""

from __future__ import annotations

from pathlib import Path

from typing import Annotated

import typer
from rich.markup import escape

from ..store.attempts import current_reward
from ..errors import SsrkitError
from ..runs.pool import close_round, round_artifacts, select_tasks
from ..store.runs import INJECT, TASKS, round_dir
from .common import Command, JsonOpt, console, err_console, print_json

pool_app = typer.Typer(help="The task pool of a run: select old tasks for a round, close a round.",
                       no_args_is_help=True, rich_markup_mode="rich")

SELECT_EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit pool select runs/r1 --round 2[/]                 as many old tasks as round 2 has new valid artifacts
  [cyan]ssrkit pool select runs/r1 --round 2 --old-ratio 0.25[/]  one old task for every three new ones

With --old-ratio r and n new valid artifacts in RUN/round-N/inject/, about r/(1−r)·n active pool tasks (all of
them when the pool is smaller) are copied into RUN/round-N/tasks/<repo>/<id>/ — definition and validation only,
so their attempts and rewards are this round's. The choice depends on --seed and the round: re-running copies
nothing twice. Run it after the round's new artifacts are validated.
"""

CLOSE_EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit pool close runs/r1 --round 2[/]
  [cyan]ssrkit pool close runs/r1 --round 2 --json | jq .solve_rate[/]

The round's valid new and higher-order artifacts join the pool; each solved task records its solve rate; tasks
solved always (too easy) or never (too hard) in their last --retire-after rounds retire; RUN/metrics.csv gets the
round's row (replaced when a round is closed again) and RUN/round-N/round.json the same numbers. Run it after
`ssrkit solve` and `ssrkit reward`; closing again is harmless.
"""


def _check_round(run: Path, round_no: int) -> None:
    if not Path(run).is_dir():
        raise SsrkitError(f"{run}: no such run directory")
    if not round_dir(run, round_no).is_dir():
        raise SsrkitError(f"{round_dir(run, round_no)} does not exist: inject the round's artifacts into "
                          f"{round_dir(run, round_no) / INJECT}/<repo>/ first")


@pool_app.command("select", epilog=SELECT_EPILOG, cls=Command)
def select(
    run: Annotated[Path, typer.Argument(help="Run directory.", show_default=False)],
    round_no: Annotated[int, typer.Option("--round", "-r", min=1, help="The round being prepared.")],
    old_ratio: Annotated[float, typer.Option(
        "--old-ratio", help="Share of the round's tasks taken from the pool, in [0, 1).",
    )] = 0.5,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the choice (with the round number).")] = 0,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Copy pool artifacts into RUN/round-N/tasks/ to mix with the round's new injections."""
    _check_round(run, round_no)
    new = round_artifacts(run, round_no, (INJECT,))[INJECT]
    n_new = sum(1 for a in new if a.is_valid)
    unvalidated = sum(1 for a in new if a.validation is None)
    if unvalidated:
        err_console.print(f"[yellow]note:[/] {unvalidated} new artifact(s) of round {round_no} are not validated "
                          f"and do not count as new (ssrkit validate {escape(str(round_dir(run, round_no) / INJECT))})")
    chosen = select_tasks(run, round_no, n_new=n_new, old_ratio=old_ratio, seed=seed)
    if as_json:
        print_json([str(p) for p in chosen])
    else:
        console.print(f"round {round_no}: {n_new} new artifact(s), {len(chosen)} carried from the pool")


@pool_app.command("close", epilog=CLOSE_EPILOG, cls=Command)
def close(
    run: Annotated[Path, typer.Argument(help="Run directory.", show_default=False)],
    round_no: Annotated[int, typer.Option("--round", "-r", min=1, help="The round that finished.")],
    retire_after: Annotated[int, typer.Option(
        "--retire-after", min=1, help="Retire artifacts always or never solved in this many rounds.",
    )] = 2,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Add the round's valid artifacts to the pool, record solve rates, retire, append metrics.csv."""
    _check_round(run, round_no)
    arts = round_artifacts(run, round_no, (INJECT, TASKS))
    unrewarded = [a for s in arts.values() for a in s if a.is_valid and current_reward(a) is None]
    if unrewarded:
        err_console.print(f"[yellow]note:[/] {len(unrewarded)} valid artifact(s) of round {round_no} have no "
                          f"reward.json of their present attempts and count as unsolved tasks with no solve "
                          f"rate; run ssrkit solve and "
                          f"ssrkit reward on them first (e.g. {escape(str(unrewarded[0].path))})")
    row = close_round(run, round_no, retire_after=retire_after)
    if as_json:
        print_json(row)
    else:
        rate = "-" if row["solve_rate"] is None else f"{row['solve_rate']:.0%}"
        console.print(f"round {round_no} closed: {row['valid']}/{row['injected']} injections valid, "
                      f"{row['solved']}/{row['attempts']} attempts solved ({rate}), {row['higher_order']} "
                      f"higher-order; pool {row['pool_size']} active, {row['pool_retired']} retired")
