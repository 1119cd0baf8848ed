"""A self-play run at a glance: per-round metrics, solve-rate histogram, strategy mix, failing checks.

Everything is recomputed from the artifact files on disk (metrics.csv is a convenience for other tools),
so the report can never disagree with the artifacts.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from ..store.artifact import Artifact, find_artifacts
from ..store.attempts import current_reward
from ..errors import SsrkitError
from ..learning import learning_rows
from ..store.follow import DROP_REASONS, pending_drops, read_ledger, read_steps_log
from .pool import Pool, round_artifacts, round_dir, round_metrics, round_numbers

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], lo: float | None = None, hi: float | None = None) -> str:
    """Unicode sparkline; gaps (None) shown as spaces. The scale is [lo, hi] (default: the values' range;
    give a fixed one, e.g. 0–1 for rates, so that a flat series does not look like a jump)."""
    nums = [v for v in values if v is not None]
    if not nums:
        return ""
    lo = min(nums) if lo is None else lo
    hi = max(nums) if hi is None else hi
    span = hi - lo or 1.0

    def level(v: float) -> str:
        x = min(1.0, max(0.0, (v - lo) / span))
        return SPARK[round(x * (len(SPARK) - 1))]

    return "".join(" " if v is None else level(v) for v in values)


#: solve-rate histogram bins: never and always solved on their own (the pool retires those), four between
HISTOGRAM_BINS = ("0%", "≤25%", "≤50%", "≤75%", "<100%", "100%")


def histogram_bin(rate: float) -> str:
    """The HISTOGRAM_BINS label of a solve rate in [0, 1]."""
    if rate <= 0.0:
        return HISTOGRAM_BINS[0]
    if rate >= 1.0:
        return HISTOGRAM_BINS[-1]
    for edge, label in ((0.25, "≤25%"), (0.5, "≤50%"), (0.75, "≤75%")):
        if rate <= edge:
            return label
    return "<100%"


def solve_rate_histogram(rates: list[float]) -> dict[str, int]:
    """Counts per HISTOGRAM_BINS label (every label present, in order)."""
    out = {label: 0 for label in HISTOGRAM_BINS}
    for r in rates:
        out[histogram_bin(float(r))] += 1
    return out


def build_report(run: Path, learning: bool = True) -> dict[str, Any]:
    """Every number of `ssrkit report`, from the artifact files (and pool.json for the pool).

    rounds: `pool.round_metrics` of each round. solve_rate_histogram: per round, the tasks solved that round
    (new and carried) by solve rate; a task carried into three rounds is counted in each. strategy_mix and
    order_mix: the valid artifacts the run made (injected or higher-order), each id once however many rounds
    made it; top_failing_checks: the first failed check of each invalid one, each id once. learning: the learning
    panel (`ssrkit.learning`); `learning` False: do not measure the KL and gap that learning.json does not hold yet
    (forward passes of the round's checkpoints).
    """
    run = Path(run)
    if not run.is_dir():
        raise SsrkitError(f"{run}: no such run directory")
    rounds = round_numbers(run)
    if not rounds:
        try:
            hint = "; it holds artifacts: `ssrkit reward` scores them" if find_artifacts([run]) else ""
        except SsrkitError:
            hint = ""
        raise SsrkitError(f"{run}: no round-NNN directories: `ssrkit report` reads a self-play run "
                          f"({round_dir(run, 1).name}/inject/<repo>/<id>/ and so on, as `make selfplay` and the "
                          f"recipes write it; recipes/README.md){hint}")
    pool = Pool.load(run)
    per_round = [round_metrics(run, n, pool) for n in rounds]
    made: dict[str, Artifact] = {}  # every artifact the run made, by id, where it first appeared
    histogram: dict[str, dict[str, int]] = {}
    for n in rounds:
        arts = round_artifacts(run, n)
        for a in (*arts["inject"], *arts["higher"]):
            made.setdefault(a.id, a)
        histogram[str(n)] = solve_rate_histogram(task_solve_rates([*arts["inject"], *arts["tasks"]]))
    valid = [a for a in made.values() if a.is_valid]
    failing = Counter(first for a in made.values() if (first := first_failed_check(a)))
    panel, note = learning_rows(run, per_round, measure=learning)
    return {
        "run": str(run),
        "rounds": per_round,
        "learning": panel,
        "learning_note": note,
        "solve_rate_histogram": histogram,
        "strategy_mix": dict(Counter(a.metadata.strategy for a in valid).most_common()),
        "order_mix": {str(k): v for k, v in sorted(Counter(a.metadata.order for a in valid).items())},
        "top_failing_checks": dict(failing.most_common(5)),
        "artifacts": len(made),
        "valid_artifacts": len(valid),
        "pool": {"active": len(pool.active), "retired": len(pool.entries) - len(pool.active)},
        **({"continuous": cont} if (cont := continuous_summary(run)) else {}),
    }


def continuous_summary(run: Path) -> dict[str, Any] | None:
    """`train --follow`'s steps (RUN/follow/steps.jsonl) and their totals; None when nothing follows the run.
    A follower that settled groups without a step yet (every rollout dropped, or none trainable) has a summary
    with no steps, so that the report says so. trainer_idle: the share of the follower's time spent waiting for
    data (None before the first step)."""
    steps, ledger = read_steps_log(run), read_ledger(run)
    if not steps and not ledger:
        return None
    pending = pending_drops(ledger)  # dropped since the last step: in no metrics line yet
    staleness: Counter = Counter()
    for s in steps:
        staleness.update(s.get("staleness") or {})
    elapsed = max(float(steps[-1].get("elapsed_s") or 0), 1e-9) if steps else 0.0
    busy = sum(float(s.get(k) or 0) for s in steps for k in ("step_s", "save_s", "refresh_s"))
    return {"steps": steps, "totals": {
        "steps": len(steps), "trained": sum(int(s.get("rollouts") or 0) for s in steps),
        "groups": len({g for line in ledger for g in line.get("groups", [])}),
        "dropped": {r: sum(int((s.get("dropped") or {}).get(r, 0)) for s in steps) + pending.get(r, 0)
                    for r in DROP_REASONS},
        "staleness": dict(sorted(staleness.items())),
        "wait_s": round(sum(float(s.get("wait_s") or 0) for s in steps), 3),
        "producer_wait_s": round(sum(float(s.get("producer_wait_s") or 0) for s in steps), 3),
        "rollouts_per_hour": steps[-1].get("rollouts_per_hour", 0.0) if steps else 0.0,
        "trainer_idle": round(max(0.0, 1 - busy / elapsed), 4) if steps else None,
    }}


def task_solve_rates(artifacts: list[Artifact]) -> list[float]:
    """The solve rate of each valid artifact with finished attempts (reward.json)."""
    return [float(r["solve_rate"]) for a in artifacts
            if (r := current_reward(a)) and r.get("valid") and r.get("n_attempts")]


def first_failed_check(artifact: Artifact) -> str | None:
    return next((c["name"] for c in (artifact.validation or {}).get("checks", []) if c["status"] == "failed"), None)


class PlotsUnavailable(SsrkitError):
    """Plots need matplotlib (the `report` extra); the report itself does not."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable("no plots: matplotlib is not installed (pip install 'ssrkit[report]')") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_lines(path: Path, x: list[int], series: dict[str, list[float | None]], *, title: str,
               xlabel: str = "round", ylim: tuple[float, float] | None = None, zero_line: bool = False) -> Path:
    """One PNG of named series over rounds (None: a gap): the report's line plots, and any other per-round curve
    (the learning panel, `benchmarks/learning.py`)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for (label, values), marker in zip(series.items(), "osD^v<>"):
        ax.plot(x[: len(values)], [float("nan") if v is None else float(v) for v in values], marker=marker,
                label=label)
    if zero_line:
        ax.axhline(0, color="grey", lw=0.5)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_xlabel(xlabel)
    ax.set_xticks(x)
    ax.legend()
    ax.set_title(title)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return _save(fig, Path(path))


def write_plots(report: dict[str, Any], out: Path) -> list[Path]:
    """PNG plots of the report (matplotlib, no display needed)."""
    plt = _pyplot()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rounds = [r["round"] for r in report["rounds"]]

    def nums(key: str) -> list[float]:
        return [float("nan") if r.get(key) is None else float(r[key]) for r in report["rounds"]]

    paths = [
        plot_lines(out / "rates.png", rounds, {"solve rate (attempts)": nums("solve_rate"),
                                               "validity rate (injections)": nums("validity_rate")},
                   title="Rates per round", ylim=(-0.05, 1.05)),
        plot_lines(out / "rewards.png", rounds, {"injector reward": nums("injector_reward_mean"),
                                                 "solver reward": nums("solver_reward_mean")},
                   title="Mean rewards per round", zero_line=True),
    ]

    if report.get("learning"):
        paths.append(plot_learning(report["learning"], out / "learning.png"))

    paths.append(_save(_histogram_figure(plt, report["solve_rate_histogram"]), out / "solve_rate_histogram.png"))

    fig, ax = plt.subplots(figsize=(6, 3.5))
    mix = report["strategy_mix"] or {"none": 0}
    ax.barh(list(mix), list(mix.values()), color="tab:green")
    ax.set_xlabel("valid artifacts (each counted once)")
    ax.set_title("Strategy mix")
    paths.append(_save(fig, out / "strategy_mix.png"))

    paths.append(_save(_time_figure(plt, rounds, nums("validate_seconds"), nums("solve_seconds")), out / "time.png"))
    return paths


def plot_learning(rows: list[dict[str, Any]], path: Path) -> Path:
    """The learning panel as curves: each role's mean reward and KL to the first policy, per round."""
    rounds = sorted({r["round"] for r in rows})
    series: dict[str, list[float | None]] = {}
    for role in ("solver", "injector"):
        mine = {r["round"]: r for r in rows if r["role"] == role}
        for key, label in (("reward_mean", "mean reward"), ("kl", "KL to the first policy")):
            values = [mine.get(n, {}).get(key) for n in rounds]
            if any(v is not None for v in values):
                series[f"{role}: {label}"] = values
    return plot_lines(path, rounds, series, title="Learning: reward and distance from the first policy",
                      zero_line=True)


def _time_figure(plt: Any, rounds: list[int], validate: list[float], solve: list[float]) -> Any:
    """metrics.csv's per-stage seconds, stacked per round."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(rounds, validate, label="validate (new artifacts)", color="tab:purple")
    ax.bar(rounds, solve, bottom=validate, label="solve + grade (every attempt)", color="tab:orange")
    ax.set_xlabel("round")
    ax.set_ylabel("sandbox seconds (summed over units)")
    ax.set_xticks(rounds)
    ax.legend()
    ax.set_title("Time per round and stage")
    return fig


def _histogram_figure(plt: Any, histogram: dict[str, dict[str, int]]) -> Any:
    """One group of bars per solve-rate bin, one bar per round: the tasks solved in that round."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / max(1, len(histogram))
    for i, (n, bins) in enumerate(histogram.items()):
        ax.bar([k + i * width for k in range(len(HISTOGRAM_BINS))], [bins[b] for b in HISTOGRAM_BINS], width,
               label=f"round {n}")
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(HISTOGRAM_BINS))], list(HISTOGRAM_BINS))
    ax.set_xlabel("solve rate")
    ax.set_ylabel("tasks solved in the round")
    ax.yaxis.get_major_locator().set_params(integer=True)
    if histogram:
        ax.legend()
    ax.set_title("Solve-rate histogram, per round")
    return fig


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2)
