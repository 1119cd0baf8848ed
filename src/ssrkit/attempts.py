"""The owner of `attempts/NNN/` and of the `reward.json` roll-up: which attempts to run, claiming a new one,
reading verdicts, and each attempt paired with its reward by *name*.

An attempt directory holds `fix.diff`, `trajectory.json` (LLM solvers), `test_output.log`,
`canary_output.log` (a passing fix's canary run) and `eval.json` (names in `artifact.py`), eval.json written
last — without it the attempt is unfinished and is redone. Making sure an artifact has N attempts is
idempotent; a larger N adds only the missing ones.

`ssrkit solve` writes `attempts/NNN/` (eval.json last: without it the attempt is unfinished) and `ssrkit reward`
writes `reward.json`, whose `solver_rewards[i]` belongs to the attempt named `attempts[i]` — only finished
attempts are listed there. Pairing by position among all attempt folders would hand an unfinished attempt's
neighbour its reward (an interrupted solve leaves one in the middle), so every reader of rewards (train, pool,
report, export, higher-order) goes through `scored_attempts` instead of indexing on its own.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .artifact import ATTEMPTS, EVAL, REWARD, TRAJECTORY, Artifact
from .errors import SsrkitError
from .fsutil import read_json

if TYPE_CHECKING:
    from .config import Config


# -- the layout -----------------------------------------------------------------------------------

def attempt_name(i: int) -> str:
    return f"{i:03d}"


def attempt_dir(artifact: Artifact, name: str) -> Path:
    return artifact.path / ATTEMPTS / name


def is_complete(d: Path) -> bool:
    return (d / EVAL).is_file()


def completed_attempts(artifact: Artifact) -> list[Path]:
    return [d for d in artifact.attempt_dirs() if is_complete(d)]


def plan_attempts(artifact: Artifact, n: int, *, redo: bool = False) -> list[str]:
    """The attempt names to (re)run so the artifact has `n` finished attempts.

    Finished attempts are kept; unfinished ones (no eval.json) are reused first, then the lowest numbers
    without a folder. So the names never depend on where an earlier solve was stopped: an interrupted
    `--attempts 2` may leave 002 begun and 001 not yet made, and its rerun runs 001 and 002 (each seeded by
    its number), as the uninterrupted solve did; a deleted attempt is redone under its own name. With
    `redo`, attempts 001..n are all run again.
    """
    if n < 0:
        raise SsrkitError("--attempts must be at least 0")
    if redo:
        return [attempt_name(i) for i in range(1, n + 1)]
    dirs = artifact.attempt_dirs()
    done = [d for d in dirs if is_complete(d)]
    need = n - len(done)
    if need <= 0:
        return []
    todo = [d.name for d in dirs if not is_complete(d)][:need]
    taken = {int(d.name) for d in dirs}
    i = 1
    while len(todo) < need:
        if i not in taken:
            todo.append(attempt_name(i))
        i += 1
    return sorted(todo)


_claim_lock = threading.Lock()


def claim_new_attempt(artifact: Artifact) -> str:
    """A fresh attempt number after every existing one, created on disk at once (safe across threads)."""
    with _claim_lock:
        dirs = artifact.attempt_dirs()
        nxt = max((int(d.name) for d in dirs), default=0) + 1
        while True:
            name = attempt_name(nxt)
            try:
                artifact.make_dir(f"{ATTEMPTS}/{name}", exist_ok=False)
                return name
            except FileExistsError:
                nxt += 1


def read_eval(artifact: Artifact, name: str) -> dict[str, Any] | None:
    """An attempt's eval.json (None while unfinished); SsrkitError when it is not valid JSON."""
    p = attempt_dir(artifact, name) / EVAL
    if not p.is_file():
        return None
    try:
        return read_json(p)
    except (ValueError, UnicodeDecodeError) as e:
        raise SsrkitError(f"{p}: not valid JSON ({e}); delete the attempt directory to redo it")


def attempt_records(artifact: Artifact) -> list[dict[str, Any]]:
    """The eval.json of every finished attempt, in attempt order."""
    out = []
    for d in completed_attempts(artifact):
        rec = read_eval(artifact, d.name)
        if rec is not None:
            out.append(rec)
    return out


# -- rewards: reward.json (the I/O around the pure functions of reward.py) -------------------------

def reward_alpha(cfg: "Config", alpha: float | None = None) -> float:
    """α of the injector reward: the flag, else `[reward] alpha`, else `reward.DEFAULT_ALPHA`; checked."""
    from .reward import DEFAULT_ALPHA, check_alpha

    try:
        return check_alpha(alpha if alpha is not None else cfg.get("reward", "alpha", DEFAULT_ALPHA))
    except (TypeError, ValueError) as e:
        raise SsrkitError(f"--alpha / [reward] alpha: {e}")


def artifact_reward(artifact: Artifact, alpha: float) -> dict[str, Any]:
    """The reward.json object from validation.json and the finished attempts (not written)."""
    from .reward import reward_record

    data = artifact.current_validation()
    valid = bool(data.get("valid"))
    records = attempt_records(artifact) if valid else []
    if valid and not records:
        raise SsrkitError(f"{artifact.path} is valid but has no finished attempt; solve it first: "
                          f"ssrkit solve {artifact.path}")
    try:
        record = reward_record(valid=valid, passed=[bool(r.get("passed")) for r in records], alpha=alpha,
                               attempts=[r.get("attempt", "?") for r in records] if valid else None)
    except ValueError as e:
        raise SsrkitError(str(e))
    return {"artifact": str(artifact.path), **record}


def write_reward(artifact: Artifact, alpha: float) -> dict[str, Any]:
    record = artifact_reward(artifact, alpha)
    artifact.write_json(REWARD, record)
    return record


# -- attempts with their rewards, as later stages read them ----------------------------------------


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


def _finished_eval(artifact: Artifact, name: str) -> dict[str, Any] | None:
    """`read_eval` for readers that must not stop on one bad file: an unreadable eval.json, or one without a
    boolean verdict, counts as unfinished."""
    try:
        data = read_eval(artifact, name)
    except (OSError, SsrkitError):
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
    dirs = art.attempt_dirs()
    evals = {d.name: _finished_eval(art, d.name) for d in dirs}
    finished = [name for name, ev in evals.items() if ev is not None]
    by_name = rewards_by_name(art.reward, finished)
    out = []
    for d in dirs:
        ev = evals[d.name]
        if ev is None:
            out.append(ScoredAttempt(d.name, d, None, None, "unfinished"))
        elif d.name in by_name:
            out.append(ScoredAttempt(d.name, d, ev, by_name[d.name], REWARD))
        else:
            out.append(ScoredAttempt(d.name, d, ev, 1.0 if ev["passed"] else -1.0, EVAL))
    return out
