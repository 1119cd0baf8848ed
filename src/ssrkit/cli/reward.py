"""`ssrkit reward`: solve rate, injector reward and per-attempt solver rewards of artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer
from rich.table import Table

from ..store.artifact import find_artifacts
from ..verdict.rewards import DEFAULT_ALPHA
from ..store.attempts import artifact_reward, reward_alpha, write_reward
from .common import safe, ConfigOpt, JsonOpt, config_for, console, print_json

EPILOG = """
[bold]Examples[/]

  Rewards of every artifact of a round (writes reward.json into each):
  [cyan]ssrkit reward runs/r1/artifacts/[/]

  Another α, machine-readable, without writing:
  [cyan]ssrkit reward runs/r1/artifacts/ --alpha 0.5 --json --no-write | jq '.[].injector_reward'[/]

Solver attempt: +1 solved, −1 otherwise. Injector, with s the solve rate: −1 if the artifact is invalid,
−α if s = 0 or s = 1, else 1 − (1 + α)·s. Invalid artifacts get −1 without being solved; a valid artifact
must have finished attempts (ssrkit solve) and an up-to-date validation.json (ssrkit validate).
"""


def reward(
    artifacts: Annotated[List[Path], typer.Argument(
        help="Artifact directories (or directories holding them).", show_default=False,
    )],
    alpha: Annotated[Optional[float], typer.Option(
        "--alpha", help=f"α of the injector reward (default {DEFAULT_ALPHA}).",
    )] = None,
    write: Annotated[bool, typer.Option(
        "--write/--no-write", help="Write reward.json into each artifact.",
    )] = True,
    config: Annotated[Optional[Path], ConfigOpt] = None,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Compute rewards from validation.json and the graded attempts; write reward.json."""
    a = reward_alpha(config_for(config, None), alpha)
    found = find_artifacts(artifacts)
    records = [write_reward(art, a) if write else artifact_reward(art, a) for art in found]
    if as_json:
        print_json(records)
        return
    table = Table(title=f"rewards (α = {a:g})", title_justify="left")
    table.add_column("artifact", overflow="fold")
    table.add_column("valid")
    table.add_column("solved", justify="right")
    table.add_column("solve rate", justify="right")
    table.add_column("injector", justify="right")
    table.add_column("solver rewards", overflow="fold")
    for r in records:
        rate = "-" if r["solve_rate"] is None else f"{r['solve_rate']:.3f}"
        inj = r["injector_reward"]
        style = "green" if inj > 0 else "red"
        table.add_row(safe(r["artifact"]), "[green]yes[/]" if r["valid"] else "[red]no[/]",
                      f"{r['n_solved']}/{r['n_attempts']}", rate, f"[{style}]{inj:+.3f}[/]",
                      " ".join("+1" if x > 0 else "-1" for x in r["solver_rewards"]))
    console.print(table)
