"""`ssrkit report`: a self-play run at a glance, in the terminal and as PNG plots."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from ..runs.report import HISTOGRAM_BINS, PlotsUnavailable, build_report, sparkline, write_plots
from .common import JsonOpt, console, print_json

EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit report runs/offline[/]                 tables, sparklines and plots in runs/offline/plots/
  [cyan]ssrkit report runs/offline --json | jq '.rounds[-1].solve_rate'[/]
"""


def _fmt(v: object, pct: bool = False) -> str:
    if v is None or v == "":
        return "-"
    if pct:
        return f"{float(v):.0%}"
    if isinstance(v, float):
        return f"{v:+.2f}" if v < 0 or v > 0 else "0.00"
    return str(v)


def _histogram_table(histogram: dict[str, dict[str, int]]) -> Table:
    """Rounds down, solve-rate bins across: each row holds the tasks solved in that round."""
    h = Table(title="tasks by solve rate, per round", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
              padding=(0, 0, 0, 1))
    for col in ("round", *HISTOGRAM_BINS, "tasks"):
        h.add_column(col, justify="right", no_wrap=True)
    for n, bins in histogram.items():
        h.add_row(n, *(str(bins[b]) for b in HISTOGRAM_BINS), str(sum(bins.values())))
    return h


def report(
    run: Annotated[Path, typer.Argument(help="A run directory (holds round-NNN/).", show_default=False)],
    plots: Annotated[Optional[Path], typer.Option(
        "--plots", help="Where to write PNG plots (default RUN/plots).",
    )] = None,
    no_plots: Annotated[bool, typer.Option("--no-plots", help="Do not write plots.")] = False,
    no_learning: Annotated[bool, typer.Option(
        "--no-learning", help="Do not load checkpoints to measure the learning panel's KL and gap (the numbers "
        "already kept in round-NNN/learning.json still show).",
    )] = False,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Show a run: per-round validity, solve rate and rewards, solve rates per round, time, strategy mix, failing
    checks, and, when the run names its policy, the learning panel (per round and role: reward, solve rate, KL to
    the first policy, sampler/trainer gap)."""
    rep = build_report(run, learning=not no_learning)
    written = []
    if not no_plots:
        try:
            written = write_plots(rep, plots or Path(run) / "plots")
        except PlotsUnavailable as exc:  # the numbers stand without pictures: say so, go on
            typer.echo(f"note: {exc}", err=True)
    rep["plots"] = [str(p) for p in written]
    if as_json:
        print_json(rep)
        return
    rounds = rep["rounds"]
    console.print(_rounds_table(run, rounds))
    if rep["learning"]:
        _print_learning(rep["learning"], rep["learning_note"])
    if rep.get("continuous"):
        _print_continuous(rep["continuous"])
    by_strategy = [(r["round"], r["validity_by_strategy"] or {}) for r in rounds]
    if any(v for _, v in by_strategy):
        console.print("validity by strategy: " + "; ".join(
            f"round {n}: " + ", ".join(f"{k} {v}" for k, v in mix.items()) for n, mix in by_strategy if mix))
    console.print(f"per round: solve rate {sparkline([r['solve_rate'] for r in rounds], 0, 1)}   "
                  f"injector reward {sparkline([r['injector_reward_mean'] for r in rounds], -1, 1)}   "
                  f"solver reward {sparkline([r['solver_reward_mean'] for r in rounds], -1, 1)}")
    console.print(_histogram_table(rep["solve_rate_histogram"]))
    console.print("sandbox time (summed over units): " + "; ".join(
        f"round {r['round']} validate {r['validate_seconds']:.0f} s, solve {r['solve_seconds']:.0f} s" for r in rounds))
    mix = ", ".join(f"{k} {v}" for k, v in rep["strategy_mix"].items()) or "-"
    console.print(f"valid artifacts by strategy (each once): {mix}")
    fails = ", ".join(f"{k} {v}" for k, v in rep["top_failing_checks"].items()) or "none"
    console.print(f"top failing checks: {fails}")
    console.print(f"pool: {rep['pool']['active']} active, {rep['pool']['retired']} retired")
    if written:
        console.print(f"plots: {', '.join(str(p) for p in written)}")


def _rounds_table(run: Path, rounds: list[dict]) -> Table:
    """One row a round: validity, tasks, solve rate, both mean rewards, higher-order artifacts, pool size."""
    # nine narrow columns with two-line headers: the table fits an 80-column terminal without cutting anything
    table = Table(title=f"[bold]{escape(str(run))}[/]", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 0, 0, 1))
    for col in ("round", "valid /\ninjected", "valid\nrate", "tasks", "solved /\nattempts", "solve\nrate",
                "injector\nreward", "solver\nreward", "higher\norder", "pool"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in rounds:
        table.add_row(str(r["round"]), f"{r['valid']}/{r['injected']}", _fmt(r["validity_rate"], True),
                      str(r["tasks"]), f"{r['solved']}/{r['attempts']}", _fmt(r["solve_rate"], True),
                      _fmt(r["injector_reward_mean"]), _fmt(r["solver_reward_mean"]), str(r["higher_order"]),
                      str(r["pool_size"]))
    return table


def _print_continuous(cont: dict) -> None:
    """`train --follow`'s steps: what each trained, how stale (steps behind: count; ? unknown), what it dropped,
    who waited, rollouts per hour; the last 20 steps and the totals."""
    t = cont["totals"]
    dropped = ", ".join(f"{k} {v}" for k, v in t["dropped"].items() if v) or "none"
    if not cont["steps"]:
        console.print(f"[bold]continuous training[/] (train --follow): no step yet; {t['groups']} complete group(s) "
                      f"settled, none trained; dropped: {dropped}")
        return
    table = Table(title="[bold]continuous training[/] (train --follow)", title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False, padding=(0, 0, 0, 1))
    for col in ("step", "trained", "staleness\n(steps: n)", "dropped\nstale", "trainer\nwait s",
                "producer\nwait s", "rollouts\n/ hour"):
        table.add_column(col, justify="right", no_wrap=True)

    def hist(h: dict) -> str:
        return " ".join(f"{'?' if k == 'unknown' else k}:{v}" for k, v in h.items()) or "-"

    for s in cont["steps"][-20:]:
        table.add_row(str(s["step"]), str(s.get("rollouts", 0)), hist(s.get("staleness") or {}),
                      str((s.get("dropped") or {}).get("stale", 0)), f"{s.get('wait_s', 0):.1f}",
                      f"{s.get('producer_wait_s', 0):.1f}", f"{s.get('rollouts_per_hour', 0):.0f}")
    table.add_row("all", str(t["trained"]), hist(t["staleness"]), str(t["dropped"]["stale"]), f"{t['wait_s']:.1f}",
                  f"{t['producer_wait_s']:.1f}", f"{t['rollouts_per_hour']:.0f}")
    console.print(table)
    console.print(f"trainer idle {t['trainer_idle']:.0%} of its time; dropped: {dropped}")


def _print_learning(rows: list[dict], note: str) -> None:
    """The learning panel: per round and role, how the policy that played the round did and how far it moved."""
    table = Table(title="[bold]learning[/] (the policy that played each round)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 0, 0, 1))
    for col in ("round", "role", "mean\nreward", "solve\nrate", "KL to first\npolicy", "sampler/\ntrainer gap",
                "tokens"):
        table.add_column(col, justify="left" if col == "role" else "right", no_wrap=True)
    for r in rows:
        table.add_row(str(r["round"]), r["role"], _fmt(r["reward_mean"]), _fmt(r["solve_rate"], True),
                      "-" if r["kl"] is None else f"{r['kl']:.4f}", "-" if r["gap"] is None else f"{r['gap']:.1e}",
                      "-" if r["tokens"] is None else str(r["tokens"]))
    console.print(table)
    if note:
        console.print(f"learning: {escape(note)}")
