"""The run directory of self-play rounds (`ssrkit pool`, `ssrkit report`, `make selfplay`) and the records an
injection run leaves in its output directory: every name of them, defined once.

    RUN/
      pool.json             POOL            the task pool: every artifact, its rounds and retirement      pool
      metrics.csv           METRICS         one row per closed round                                      pool
      round-NNN/            round_dir(run, n)
        inject/<repo>/      INJECT          the round's new artifacts, as `ssrkit inject --out` wrote them  inject
          inject.json       INJECT_SUMMARY  the injection run's record (`inject-K-of-N.json` per shard)     inject
          inject-config.toml INJECT_CONFIG  the configuration the injection ran with                       inject
        tasks/<repo>/       TASKS           copies of earlier valid artifacts the round solves again        pool
        higher/<repo>/      HIGHER          higher-order artifacts made from the round's failed attempts    higher-order
        round.json          ROUND_SUMMARY   the round's metrics row                                        pool
        policy/             POLICY_DIR      the checkpoint trained after the round, when the run trains     train
        learning.json       LEARNING        the learning panel's measures of the round                     report
      follow/               FOLLOW          `train --follow RUN`'s checkpoints, ledger and metrics (store/follow.py)  train
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

from .config import setting
from .fsutil import read_json

POOL = "pool.json"
METRICS = "metrics.csv"
ROUND_SUMMARY = "round.json"
#: the checkpoint trained after a round (its train_config.toml names the checkpoint that played the round)
POLICY_DIR = "policy"
#: the learning panel's measures of a round (`ssrkit.learning`), kept with the checkpoints they were made from
LEARNING = "learning.json"
INJECT, TASKS, HIGHER = "inject", "tasks", "higher"
#: continuous training's directory (`train --follow RUN`; its files are store/follow.py's)
FOLLOW = "follow"
SECTIONS = (INJECT, TASKS, HIGHER)
#: the file name of an injection run's record, in its output directory
INJECT_SUMMARY = "inject.json"
#: every run's record in an output directory: `inject.json`, and `inject-K-of-N.json` of each shard (shards may
#: share one output directory)
INJECT_SUMMARIES = "inject*.json"
#: the configuration an injection ran with, beside its record
INJECT_CONFIG = "inject-config.toml"


def round_dir(run: Path, n: int) -> Path:
    return Path(run) / f"round-{n:03d}"


def round_numbers(run: Path) -> list[int]:
    out = []
    for p in Path(run).glob("round-*"):
        suffix = p.name.split("-", 1)[1]
        if p.is_dir() and suffix.isdigit():
            out.append(int(suffix))
    return sorted(out)


def summary_name(shard: Any = None) -> str:
    """The name of an injection run's record: one per shard (an `executor.Shard`: k of n), so shards writing into
    one directory keep theirs."""
    return INJECT_SUMMARY if shard is None else f"inject-{shard.k}-of-{shard.n}.json"


def inject_records(directory: Path) -> Iterator[Path]:
    """Every injection run's record at or below `directory`."""
    return Path(directory).rglob(INJECT_SUMMARIES)


def read_inject_record(path: Path) -> dict[str, Any] | None:
    """An injection run's record; None when it cannot be read (a run-level view goes on without it)."""
    try:
        data = read_json(Path(path))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: the variables `recipes/selfplay.mk` records in `[run]` of RUN/ssrkit.toml (recipes/README.md), besides where
#: units run (`executor.ExecutorSettings`): no command is configured by them, they say how the run was made
RECIPE_VARIABLES = {
    "mode": "MODE: procedural or model", "repos": "REPOS: the repositories' paths", "rounds": "ROUNDS",
    "n": "N: injections per repository and round", "injector": "INJECTOR", "strategies": "STRATEGIES",
    "solver": "SOLVER", "attempts": "ATTEMPTS", "jobs": "JOBS", "seed": "SEED", "old_ratio": "OLD_RATIO",
    "retire_after": "RETIRE_AFTER", "higher_max": "HIGHER_MAX", "budget_runs": "BUDGET_RUNS",
    "partial": "PARTIAL", "inject_base_url": "INJECT_BASE_URL", "inject_model": "INJECT_MODEL",
    "solve_base_url": "SOLVE_BASE_URL", "solve_model": "SOLVE_MODEL", "serve": "SERVE",
    "policy": "POLICY: the first round's policy", "train": "whether rounds train (yes, no)",
}


#: `[run]`'s record of the recipe's variables (any TOML value: the recipe writes what it was given)
RecipeRecord = dataclasses.make_dataclass(
    "RecipeRecord", [(k, Any, setting(None, help=f"the recipe's {v}")) for k, v in RECIPE_VARIABLES.items()],
    namespace={"SECTION": "run", "__module__": __name__})
