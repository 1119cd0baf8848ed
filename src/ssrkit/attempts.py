"""Solver attempts as later stages read them: each attempt paired with its reward by *name*.

`ssrkit solve` writes `attempts/NNN/` (eval.json last: without it the attempt is unfinished) and `ssrkit reward`
writes `reward.json`, whose `solver_rewards[i]` belongs to the attempt named `attempts[i]` — only finished
attempts are listed there. Pairing by position among all attempt folders would hand an unfinished attempt's
neighbour its reward (an interrupted solve leaves one in the middle), so every reader of rewards (train, pool,
report, export, higher-order) goes through `scored_attempts` instead of indexing on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .artifact import ATTEMPTS, TRAJECTORY, Artifact

EVAL = "eval.json"


@dataclass(frozen=True)
class ScoredAttempt:
    name: str  # "001"
    path: Path  # attempts/001
    eval: dict[str, Any] | None  # eval.json, None while unfinished (or unreadable)
    reward: float | None  # None: unfinished, so never rewarded
    source: str  # where the reward came from: "reward.json", "eval.json" or "unfinished"

    @property
    def finished(self) -> bool:
        return self.eval is not None

    @property
    def passed(self) -> bool:
        return bool(self.eval and self.eval.get("passed") is True)

    @property
    def trajectory(self) -> Path:
        return self.path / TRAJECTORY


def _read_eval(path: Path) -> dict[str, Any] | None:
    import json

    try:
        data = json.loads((path / EVAL).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("passed"), bool) else None


def rewards_by_name(reward: dict[str, Any] | None, finished: list[str]) -> dict[str, float]:
    """reward.json's solver rewards keyed by attempt name.

    A record with an `attempts` list pairs names with rewards directly. One without it (written before names
    were recorded) lists the finished attempts in order, so it pairs with `finished` by position — and only
    when the counts agree; otherwise it cannot be trusted and nothing is taken from it.
    """
    if not isinstance(reward, dict):
        return {}
    values = reward.get("solver_rewards")
    if not isinstance(values, list):
        return {}
    names = reward.get("attempts")
    if not isinstance(names, list):
        if len(values) != len(finished):
            return {}
        names = finished
    if len(names) != len(values):
        return {}
    return {str(n): float(v) for n, v in zip(names, values) if isinstance(v, (int, float))}


def scored_attempts(artifact: Artifact | Path) -> list[ScoredAttempt]:
    """Every attempt of `artifact` in name order, with its reward (None for an unfinished attempt).

    The reward is reward.json's for that name when it has one; a finished attempt that reward.json does not
    cover (solved after `ssrkit reward` ran) gets its eval.json verdict as a reward (+1 passed, −1 otherwise).
    """
    art = artifact if isinstance(artifact, Artifact) else Artifact(artifact)
    root = art.path / ATTEMPTS
    dirs = sorted(p for p in root.iterdir() if p.is_dir() and p.name.isdigit()) if root.is_dir() else []
    evals = {d.name: _read_eval(d) for d in dirs}
    finished = [name for name, ev in evals.items() if ev is not None]
    by_name = rewards_by_name(art.reward, finished)
    out = []
    for d in dirs:
        ev = evals[d.name]
        if ev is None:
            out.append(ScoredAttempt(d.name, d, None, None, "unfinished"))
        elif d.name in by_name:
            out.append(ScoredAttempt(d.name, d, ev, by_name[d.name], "reward.json"))
        else:
            out.append(ScoredAttempt(d.name, d, ev, 1.0 if ev["passed"] else -1.0, "eval.json"))
    return out
