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

A verdict or a reward counts only while it provably belongs to the files it judged. eval.json records the
artifact's `content_id` and the sha256 of the attempt's `fix.diff` (`attempt_binding`); one that lacks either,
or whose values are not those of the present files, is *stale*: never rewarded, and redone by the next solve
like an unfinished attempt. reward.json records the `content_id`, whether the artifact was valid, and the
sha256 of each eval.json it was computed from (`evals`); a regrade, a new attempt or a changed artifact makes
it stale (`current_reward` is None: run `ssrkit reward` again), and each attempt is then rewarded by its own
eval.json alone.
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from .. import __version__
from ..errors import SsrkitError
from ..verdict.rewards import DEFAULT_ALPHA
from .config import load_settings, setting
from .artifact import ATTEMPTS, CANARY_OUTPUT, EVAL, FIX, REWARD, TEST_OUTPUT, Artifact, now_iso
from .fsutil import json_text, read_json, read_tree, write_tree
from .trajectory import path_in

if TYPE_CHECKING:
    from .config import Config


# -- the layout -----------------------------------------------------------------------------------

def attempt_name(i: int) -> str:
    return f"{i:03d}"


def attempt_dir(artifact: Artifact, name: str) -> Path:
    return artifact.path / ATTEMPTS / name


def is_complete(d: Path) -> bool:
    """eval.json is there (the attempt ended; whether its verdict still counts is `attempt_state`'s business)."""
    return (d / EVAL).is_file()


def any_complete(artifact: Artifact) -> bool:
    """Some attempt of `artifact` ended (has an eval.json)."""
    return any(is_complete(d) for d in artifact.attempt_dirs())


# -- writing an attempt (`ssrkit solve`: the fix first, eval.json last) ------------------------------

def begin_attempt(artifact: Artifact, name: str) -> Path:
    """An empty `attempts/NAME/`, whatever an earlier run left there; SsrkitError when `attempts/` or the
    attempt directory is a symlink (`Artifact.output_path`)."""
    artifact.remove(f"{ATTEMPTS}/{name}")
    return artifact.make_dir(f"{ATTEMPTS}/{name}")


def write_fix(artifact: Artifact, name: str, fix: str) -> Path:
    return artifact.write_text(f"{ATTEMPTS}/{name}/{FIX}", fix)


def has_fix(artifact: Artifact, name: str) -> bool:
    return (attempt_dir(artifact, name) / FIX).is_file()


def read_fix(artifact: Artifact, name: str, limit: int | None = None) -> str | None:
    """The attempt's fix.diff as text (undecodable bytes replaced), None when there is none. With `limit`,
    at most `limit` bytes are read: past a size limit the rest is never needed (the verdict is "too large")."""
    try:
        with open(attempt_dir(artifact, name) / FIX, "rb") as fh:
            data = fh.read() if limit is None else fh.read(limit)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return data.decode("utf-8", "replace")


def has_trajectory(artifact: Artifact, name: str) -> bool:
    """The attempt's solver saved a trajectory.json (an LLM solver)."""
    return path_in(attempt_dir(artifact, name)).is_file()


def eval_record(verdict: dict[str, Any], *, solver: str, attempt: str, artifact: Artifact,
                solver_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The eval.json object of one attempt: who made the fix, then the verdict's fields (`Grade.to_dict()`),
    then when and by which ssrkit (not bound to the files yet: `write_graded` adds that)."""
    record = {
        "passed": verdict["passed"],
        "reason": verdict["reason"],
        "tests": verdict["tests"],
        "exit_code": verdict["exit_code"],
        "solver": solver,
        "attempt": attempt,
        "artifact": str(artifact.path),
        "artifact_id": artifact.id,
    }
    record.update({k: v for k, v in verdict.items() if k not in record})
    record["solver_info"] = solver_info or {}
    record["graded"] = now_iso()
    record["ssrkit_version"] = __version__
    return record


def write_graded(artifact: Artifact, name: str, log: str, canary_log: str, record: dict[str, Any]) -> dict[str, Any]:
    """A graded attempt's logs, then its eval.json bound to the files it judged (`attempt_binding`): the
    record as written."""
    artifact.write_text(f"{ATTEMPTS}/{name}/{TEST_OUTPUT}", log)
    canary = f"{ATTEMPTS}/{name}/{CANARY_OUTPUT}"
    if canary_log:
        artifact.write_text(canary, canary_log)
    else:
        artifact.remove(canary)  # a regrade without a canary run: no stale log of an earlier one
    record = {**record, **attempt_binding(artifact, name)}
    artifact.write_json(f"{ATTEMPTS}/{name}/{EVAL}", record)
    return record


def attempt_files(artifact: Artifact, name: str) -> dict[str, bytes]:
    """Every file of an attempt by relative path (what a unit made in a scratch copy sends back)."""
    return read_tree(attempt_dir(artifact, name))


def as_received(record: dict[str, Any], files: dict[str, bytes]) -> dict[str, bytes]:
    """An attempt made elsewhere (a node's scratch copy), its record and files relabeled to the driver's paths,
    as the driver writes it: `record` bound to the fix as it arrives, written as eval.json (updates `record`)."""
    if FIX in files:
        record["fix_sha256"] = hashlib.sha256(files[FIX]).hexdigest()
    return {**files, EVAL: json_text(record).encode("utf-8")}


def receive_attempt(artifact: Artifact, name: str, files: dict[str, bytes]) -> None:
    """Write an attempt made elsewhere (`as_received`) over `attempts/NAME/`, eval.json last."""
    write_tree(begin_attempt(artifact, name), files, last=(EVAL,))


def file_digest(path: Path) -> str | None:
    """sha256 of a file's bytes, read in chunks (a GB of it costs no memory); None when there is no such file."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    return h.hexdigest()


def attempt_binding(artifact: Artifact, name: str) -> dict[str, Any]:
    """What eval.json records of the files it judged: the artifact's content id and the fix's sha256."""
    return {"content_id": artifact.content_id(), "fix_sha256": file_digest(attempt_dir(artifact, name) / FIX)}


FINISHED, STALE, UNFINISHED = "finished", "stale", "unfinished"


def attempt_state(artifact: Artifact, d: Path, content_id: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """(state, eval.json) of attempt folder `d`: finished (a verdict on the present artifact files and
    fix.diff), stale (eval.json judged other files, or does not say which) or unfinished (no readable
    eval.json with a boolean verdict). `content_id`: the artifact's, when the caller has it."""
    ev = _finished_eval(artifact, d.name)
    if ev is None:
        return UNFINISHED, None
    cid = content_id or artifact.content_id()
    fix = file_digest(d / FIX)
    if ev.get("content_id") != cid or fix is None or ev.get("fix_sha256") != fix:
        return STALE, ev
    return FINISHED, ev


def completed_attempts(artifact: Artifact) -> list[Path]:
    """The attempt folders whose eval.json is a verdict on the present files."""
    cid = artifact.content_id()
    return [d for d in artifact.attempt_dirs() if attempt_state(artifact, d, cid)[0] == FINISHED]


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
    done = set(d.name for d in completed_attempts(artifact))
    need = n - len(done)
    if need <= 0:
        return []
    todo = [d.name for d in dirs if d.name not in done][:need]  # unfinished or stale: made again
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
    """The eval.json of every finished attempt (a verdict on the present files), in attempt order."""
    cid = artifact.content_id()
    return [ev for d in artifact.attempt_dirs() for state, ev in [attempt_state(artifact, d, cid)]
            if state == FINISHED and ev is not None]


# -- rewards: reward.json (the I/O around the pure functions of reward.py) -------------------------

@dataclass
class RewardSettings:
    """`[reward]`: the rewards' settings (their pure functions are `verdict.rewards`)."""

    SECTION: ClassVar[str] = "reward"

    alpha: float = setting(DEFAULT_ALPHA, help="α of the injector reward: an artifact every attempt solves, or none does, gets −α")


def reward_alpha(cfg: "Config", alpha: float | None = None) -> float:
    """α of the injector reward: the flag, else `[reward] alpha`, else `reward.DEFAULT_ALPHA`; checked."""
    from ..verdict.rewards import check_alpha

    try:
        return check_alpha(load_settings(RewardSettings, cfg, alpha=alpha).alpha)
    except (TypeError, ValueError) as e:
        raise SsrkitError(f"--alpha / [reward] alpha: {e}")


def artifact_reward(artifact: Artifact, alpha: float) -> dict[str, Any]:
    """The reward.json object from validation.json and the finished attempts (not written)."""
    from ..verdict.rewards import reward_record

    data = artifact.current_validation()
    valid = bool(data.get("valid"))
    finished = completed_attempts(artifact) if valid else []
    if valid and not finished:
        stale = [d.name for d in artifact.attempt_dirs() if attempt_state(artifact, d)[0] == STALE]
        why = (f"; attempt(s) {', '.join(stale)} judged other files (regrade them: ssrkit solve --regrade "
               f"{artifact.path})") if stale else ""
        raise SsrkitError(f"{artifact.path} is valid but has no finished attempt{why}; solve it first: "
                          f"ssrkit solve {artifact.path}")
    records = [read_eval(artifact, d.name) or {} for d in finished]
    try:
        record = reward_record(valid=valid, passed=[bool(r.get("passed")) for r in records], alpha=alpha,
                               attempts=[d.name for d in finished] if valid else None)
    except ValueError as e:
        raise SsrkitError(str(e))
    return {"artifact": str(artifact.path), **record, **reward_binding(artifact, valid, finished)}


def reward_binding(artifact: Artifact, valid: bool, finished: list[Path] | None = None) -> dict[str, Any]:
    """What reward.json records of the files it was computed from (`current_reward` compares them): the
    artifact's content id and the sha256 of each finished attempt's eval.json (default: the present ones)."""
    if finished is None:
        finished = completed_attempts(artifact) if valid else []
    return {"content_id": artifact.content_id(), "evals": {d.name: file_digest(d / EVAL) for d in finished}}


def current_reward(artifact: Artifact) -> dict[str, Any] | None:
    """reward.json, when it was computed from the present files: the artifact's content, its present
    validity and exactly the eval.json of its finished attempts; None otherwise (absent, unreadable or stale:
    `ssrkit reward` makes it again)."""
    try:
        reward = artifact.reward
    except SsrkitError:
        return None
    validation = artifact.validation_if_current()
    if not isinstance(reward, dict) or validation is None:
        return None
    valid = bool(validation.get("valid"))
    if reward.get("content_id") != artifact.content_id() or reward.get("valid") is not valid:
        return None
    finished = completed_attempts(artifact) if valid else []
    if reward.get("evals") != {d.name: file_digest(d / EVAL) for d in finished}:
        return None
    return reward


def write_reward(artifact: Artifact, alpha: float) -> dict[str, Any]:
    record = artifact_reward(artifact, alpha)
    artifact.write_json(REWARD, record)
    return record


# -- attempts with their rewards, as later stages read them ----------------------------------------


@dataclass(frozen=True)
class ScoredAttempt:
    name: str  # "001"
    path: Path  # attempts/001
    eval: dict[str, Any] | None  # eval.json, None while unfinished (or unreadable) or stale
    reward: float | None  # None: unfinished or stale, so never rewarded
    source: str  # where the reward came from: "reward.json", "eval.json"; else "unfinished" or "stale"

    @property
    def finished(self) -> bool:
        return self.eval is not None

    @property
    def passed(self) -> bool:
        return bool(self.eval and self.eval.get("passed") is True)

    @property
    def trajectory(self) -> Path:
        return path_in(self.path)


def _finished_eval(artifact: Artifact, name: str) -> dict[str, Any] | None:
    """`read_eval` for readers that must not stop on one bad file: an unreadable eval.json, or one without a
    boolean verdict, counts as unfinished."""
    try:
        data = read_eval(artifact, name)
    except (OSError, SsrkitError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("passed"), bool) else None


def rewards_by_name(reward: dict[str, Any] | None) -> dict[str, float]:
    """reward.json's solver rewards keyed by attempt name (its `attempts` list pairs them; a record without
    one pairs nothing)."""
    if not isinstance(reward, dict):
        return {}
    values, names = reward.get("solver_rewards"), reward.get("attempts")
    if not isinstance(values, list) or not isinstance(names, list) or len(names) != len(values):
        return {}
    return {str(n): float(v) for n, v in zip(names, values) if isinstance(v, (int, float))}


def scored_attempts(artifact: Artifact | Path) -> list[ScoredAttempt]:
    """Every attempt of `artifact` in name order, with its reward (None for an unfinished or stale attempt).

    The reward is reward.json's for that name while reward.json is current (`current_reward`); a finished
    attempt it does not cover (solved or regraded after `ssrkit reward` ran) gets its eval.json verdict as a
    reward (+1 passed, −1 otherwise).
    """
    art = artifact if isinstance(artifact, Artifact) else Artifact(artifact)
    cid = art.content_id()
    by_name = rewards_by_name(current_reward(art))
    out = []
    for d in art.attempt_dirs():
        state, ev = attempt_state(art, d, cid)
        if state != FINISHED or ev is None:
            out.append(ScoredAttempt(d.name, d, None, None, state))
        elif d.name in by_name:
            out.append(ScoredAttempt(d.name, d, ev, by_name[d.name], REWARD))
        else:
            out.append(ScoredAttempt(d.name, d, ev, 1.0 if ev["passed"] else -1.0, EVAL))
    return out
