"""What `ssrkit train --follow RUN` keeps in the run directory: committed steps, the ledger, metrics, state.

    RUN/follow/                       runs.FOLLOW (store/runs.py draws RUN)
      checkpoints/step-000000/        the root: --model's files (hard links where possible) + policy.json
      checkpoints/.step-000005.partial/   a step being written (removed at start: a killed write)
      checkpoints/step-000005/        weights or adapter, tokenizer, policy.json, step.json (STEP_RECORD),
                                      state/ (optimizer and RNG; only the newest committed step keeps it)
      ledger.jsonl    LEDGER          one line per committed step: every rollout it trained or dropped
      steps.jsonl     STEPS_LOG       one metrics record per committed step (`ssrkit report`)
      follow.json     STATE           the follower's state for people and the recipe (not needed to resume)
      lock            LOCK            flock held by the running follower (kill -9 releases it)
      train.log, trainer.pid          TRAIN_LOG, TRAINER_PID: written by the recipe that starts the follower

A step commits by one rename, `.step-N.partial` -> `step-N`, after its ledger line was appended and fsynced. A
ledger line counts only when its step is committed: at start, lines of steps that never committed are dropped
(their rollouts are free again), so kill -9 at any point neither loses a rollout nor trains one twice.
Stdlib only: the report and the recipe's helper read these files without torch.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path
from typing import IO, Any

from ..errors import SsrkitError
from .fsutil import atomic_write_json, read_json
from .policy import FILE as POLICY_FILE
from .policy import PolicyVersion, read_version, root_version, write_version
from .runs import FOLLOW

CHECKPOINTS = "checkpoints"
LEDGER = "ledger.jsonl"
STEPS_LOG = "steps.jsonl"
STATE = "follow.json"
LOCK = "lock"
STEP_RECORD = "step.json"
STATE_DIR = "state"
TRAIN_LOG = "train.log"
TRAINER_PID = "trainer.pid"
STATE_FORMAT = "ssrkit.follow/1"
#: why a rollout was not trained (counted per step in the metrics)
DROP_REASONS = ("stale", "unknown_version", "zero_variance", "singleton", "status", "masked", "no_tokens")


def follow_dir(run: Path) -> Path:
    return Path(run) / FOLLOW


def checkpoints_dir(run: Path) -> Path:
    return follow_dir(run) / CHECKPOINTS


def step_dir(run: Path, n: int) -> Path:
    return checkpoints_dir(run) / f"step-{n:06d}"


def _partial(run: Path, n: int) -> Path:
    return checkpoints_dir(run) / f".step-{n:06d}.partial"


def committed_steps(run: Path) -> list[int]:
    """Steps whose directory exists (a rename made it: it is whole), oldest first."""
    out = []
    for p in checkpoints_dir(run).glob("step-*"):
        suffix = p.name.split("-", 1)[1]
        if suffix.isdigit() and (p / POLICY_FILE).is_file():
            out.append(int(suffix))
    return sorted(out)


def clean_partials(run: Path) -> None:
    for p in checkpoints_dir(run).glob(".step-*.partial"):
        shutil.rmtree(p, ignore_errors=True)


def begin_step(run: Path, n: int) -> Path:
    """A fresh partial directory for step `n`."""
    p = _partial(run, n)
    shutil.rmtree(p, ignore_errors=True)
    p.mkdir(parents=True)
    return p


def commit_step(run: Path, n: int) -> Path:
    """Make step `n` visible: one rename, then fsync of the directory that holds it."""
    final = step_dir(run, n)
    os.replace(_partial(run, n), final)
    fd = os.open(checkpoints_dir(run), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return final


def adopt_root(run: Path, model: Path) -> tuple[int, PolicyVersion]:
    """The lineage's first committed step: `model`'s files linked (copied across filesystems) with its version;
    a model without one becomes step 0 of a new lineage."""
    version = read_version(model) or root_version()
    partial = begin_step(run, version.step)
    shutil.rmtree(partial)

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(model, partial, copy_function=link, ignore=shutil.ignore_patterns(POLICY_FILE, STATE_DIR))
    write_version(partial, version)
    commit_step(run, version.step)
    return version.step, version


def _read_lines(path: Path) -> list[dict[str, Any]]:
    """JSON lines; a torn last line (a write killed half-way) is ignored."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def _append(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def _rewrite(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


def read_ledger(run: Path) -> list[dict[str, Any]]:
    return _read_lines(follow_dir(run) / LEDGER)


def append_ledger(run: Path, line: dict[str, Any]) -> None:
    _append(follow_dir(run) / LEDGER, line)


def pending_drops(ledger: list[dict[str, Any]]) -> dict[str, int]:
    """Drops by reason of the drop-only ledger lines written since the last step committed (lines under the newest
    step, with nothing trained). The next step's metrics line counts them, so a restart must read them from here;
    until then steps.jsonl does not have them."""
    newest = max((line.get("step", 0) for line in ledger if line.get("trained")), default=None)
    counts: dict[str, int] = {}
    for line in ledger:
        if not line.get("trained") and (newest is None or line.get("step") == newest):
            for d in line.get("dropped", []):
                counts[d["reason"]] = counts.get(d["reason"], 0) + 1
    return counts


def read_steps_log(run: Path) -> list[dict[str, Any]]:
    return _read_lines(follow_dir(run) / STEPS_LOG)


def append_steps_log(run: Path, record: dict[str, Any]) -> None:
    _append(follow_dir(run) / STEPS_LOG, record)


def reconcile(run: Path) -> list[dict[str, Any]]:
    """After a crash: keep the ledger lines and metrics of committed steps only, and write the metrics of a
    committed step that lacks them (killed between the rename and the metrics line) from its step.json."""
    committed = set(committed_steps(run))
    ledger = [line for line in read_ledger(run) if line.get("step") in committed]
    follow_dir(run).mkdir(parents=True, exist_ok=True)
    _rewrite(follow_dir(run) / LEDGER, ledger)
    steps = {r.get("step"): r for r in read_steps_log(run) if r.get("step") in committed}
    for line in ledger:
        if line["step"] not in steps:
            record = read_json(step_dir(run, line["step"]) / STEP_RECORD)
            steps[line["step"]] = record.get("metrics", {}) if isinstance(record, dict) else {}
    _rewrite(follow_dir(run) / STEPS_LOG, [steps[k] for k in sorted(steps, key=int)])
    return ledger


def write_step_record(step_path: Path, record: dict[str, Any]) -> None:
    atomic_write_json(step_path / STEP_RECORD, record, sort_keys=True)


def read_state(run: Path) -> dict[str, Any] | None:
    try:
        data = read_json(follow_dir(run) / STATE)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_state(run: Path, state: dict[str, Any]) -> None:
    atomic_write_json(follow_dir(run) / STATE, {"format": STATE_FORMAT, **state})


def lock(run: Path) -> IO[str]:
    """Hold the follower's lock of `run` (kept while the returned file is open); SsrkitError when another
    follower holds it."""
    follow_dir(run).mkdir(parents=True, exist_ok=True)
    fh = open(follow_dir(run) / LOCK, "a+", encoding="utf-8")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "?"
        fh.close()
        raise SsrkitError(f"another `train --follow` (pid {holder}) follows {run}: stop it first") from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    return fh


def prune(run: Path, keep: int, protect: set[int]) -> None:
    """Remove committed steps beyond the newest `keep` (never the root, never one in `protect`), and the
    optimizer state of every step but the newest."""
    steps = committed_steps(run)
    for n in steps[:-1]:
        shutil.rmtree(step_dir(run, n) / STATE_DIR, ignore_errors=True)
    for n in steps[1:-keep] if keep > 0 else []:
        if n not in protect:
            shutil.rmtree(step_dir(run, n), ignore_errors=True)

