"""Rollout files: rollouts from any source, one JSON object per line, that `ssrkit train FILE.jsonl` trains on.

    {"trajectory": {"format": "ssrkit.trajectory/1", ...}, "role": "capital-letter", "group": "prompt-3", "reward": 1}
    {"trajectory": "round-001/attempts/002/trajectory.json", "role": "solver", "group": "artifact-17", "reward": -1}

- `trajectory`: a `ssrkit.trajectory/1` object, inline, or the path of a file holding one (a relative path is
  relative to the rollout file's folder).
- `role`: "solver", "injector" or any task name. Rollouts are compared only within their role and group, and
  `--roles` selects by it.
- `group`: the GRPO group key, a string or an integer: the rollouts of one role sharing it are one group.
- `reward`: a finite number.
- `info` (optional): an object the trainer ignores, for the producer's own notes (a seed, a prompt id...).

Blank lines are skipped; any other key is an error (a misspelled `rewards` must not train on nothing). The whole
file is checked before anything trains, and each problem is one line naming FILE:LINE and what to change. A
trajectory is checked for what the trainer relies on: its format tag, an exit status, lists of messages and
turns, and per turn token ids that are integers and log-probs that are numbers, one per completion token.

This module is the format's only reader and writer: `read_rollouts` checks a file and returns one
`RolloutLine` per rollout (an inline trajectory is not kept in memory: `load()` reads its line again), and
`rollout_record` + `write_rollouts` make lines that `read_rollouts` accepts. The trajectory's format tag
(`TRAJECTORY_FORMAT`) is `ssrkit.store.trajectory`'s, which `ssrkit.agents.trajectory` writes.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .errors import SsrkitError
from .store.fsutil import atomic_write_text
from .store import trajectory as trajectories
from .store.trajectory import FORMAT as TRAJECTORY_FORMAT
#: the file name suffix that makes a path given to `ssrkit train` a rollout file
SUFFIX = ".jsonl"
REQUIRED = ("trajectory", "role", "group", "reward")
OPTIONAL = ("info",)


class RolloutFileError(SsrkitError):
    """A rollout file that cannot be trained on; the message names FILE:LINE."""


@dataclass(frozen=True)
class RolloutLine:
    """One rollout of a rollout file. `trajectory` is the trajectory's file, or the rollout file itself when the
    trajectory is inline (then `offset` is the byte offset of its line)."""

    where: str  # FILE:LINE
    role: str
    group: str
    reward: float
    exit_status: str
    trajectory: Path
    offset: int | None = None

    @property
    def name(self) -> str:
        return self.where

    def load(self) -> dict[str, Any]:
        """The trajectory, read again from its file or its line."""
        if self.offset is None:
            return trajectories.read(self.trajectory)
        with self.trajectory.open("rb") as fh:
            fh.seek(self.offset)
            return json.loads(fh.readline())["trajectory"]


def is_rollout_file(path: Path) -> bool:
    return Path(path).suffix == SUFFIX and Path(path).is_file()


# -- checks --------------------------------------------------------------------------------------------

def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _turn_problem(turn: Any, k: int, n_messages: int) -> str | None:
    where = f"turns[{k}]"
    if not isinstance(turn, dict):
        return f"{where} is not an object"
    for key in ("prompt_token_ids", "completion_token_ids"):
        if turn.get(key) is not None and not _int_list(turn[key]):
            return f"{where}.{key} must be a list of integer token ids (or null)"
    logprobs = turn.get("logprobs")
    if logprobs is not None:
        if not isinstance(logprobs, list) or not all(v is None or _is_number(v) for v in logprobs):
            return f"{where}.logprobs must be a list of numbers, one per completion token (or null)"
        if len(logprobs) != len(turn.get("completion_token_ids") or []):
            return (f"{where}.logprobs has {len(logprobs)} values for "
                    f"{len(turn.get('completion_token_ids') or [])} completion tokens")
    index = turn.get("message_index")
    if index is not None and (not isinstance(index, int) or not 0 <= index < n_messages):
        return f"{where}.message_index {index!r} does not point into messages ({n_messages})"
    return None


def trajectory_problem(data: Any) -> str | None:
    """What keeps `data` from being a trajectory the trainer can read, or None."""
    if not isinstance(data, dict):
        return "the trajectory is not a JSON object"
    if data.get("format") != TRAJECTORY_FORMAT:
        return f"the trajectory's format is {data.get('format')!r}, not {TRAJECTORY_FORMAT!r}"
    if not isinstance(data.get("exit_status"), str) or not data["exit_status"]:
        return 'the trajectory has no exit_status (e.g. "submitted")'
    messages, turns = data.get("messages"), data.get("turns")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        return "the trajectory's messages must be a list of {role, content} objects"
    if not isinstance(turns, list):
        return "the trajectory's turns must be a list"
    for k, turn in enumerate(turns):
        problem = _turn_problem(turn, k, len(messages))
        if problem:
            return problem
    return None


def record_problem(record: Any) -> str | None:
    """What is wrong with one line's object (its trajectory aside), or None."""
    if not isinstance(record, dict):
        return "not a JSON object"
    missing = [k for k in REQUIRED if k not in record]
    if missing:
        return f"missing {', '.join(missing)} (each line needs {', '.join(REQUIRED)})"
    unknown = sorted(set(record) - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        return f"unknown key {', '.join(map(repr, unknown))} (known: {', '.join(REQUIRED + OPTIONAL)})"
    if not isinstance(record["role"], str) or not record["role"].strip():
        return "role must be a non-empty string (solver, injector or a task name)"
    group = record["group"]
    if isinstance(group, bool) or not isinstance(group, (str, int)) or group == "":
        return "group must be a non-empty string or an integer"
    if not _is_number(record["reward"]):
        return f"reward must be a finite number, got {record['reward']!r}"
    if "info" in record and not isinstance(record["info"], dict):
        return "info must be an object"
    if not isinstance(record["trajectory"], (dict, str)) or record["trajectory"] == "":
        return "trajectory must be a trajectory object or the path of a trajectory file"
    return None


# -- reading -------------------------------------------------------------------------------------------

def _trajectory_file(value: str, base: Path) -> tuple[Path, dict[str, Any]]:
    path = Path(value) if Path(value).is_absolute() else base / value
    if not path.is_file():
        raise ValueError(f"trajectory file {path} not found")
    try:
        return path, json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"trajectory file {path} is not JSON ({exc})") from None


def _parse_line(raw: bytes, where: str, base: Path, source: Path, offset: int) -> RolloutLine:
    try:
        record = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RolloutFileError(f"{where}: not valid JSON ({exc})") from None
    problem = record_problem(record)
    if problem:
        raise RolloutFileError(f"{where}: {problem}")
    inline = isinstance(record["trajectory"], dict)
    try:
        path, data = (source, record["trajectory"]) if inline else _trajectory_file(record["trajectory"], base)
    except ValueError as exc:
        raise RolloutFileError(f"{where}: {exc}") from None
    problem = trajectory_problem(data)
    if problem:
        raise RolloutFileError(f"{where}: {problem}" + ("" if inline else f" ({path})"))
    return RolloutLine(where, record["role"].strip(), str(record["group"]), float(record["reward"]),
                       data["exit_status"], path, offset if inline else None)


def read_rollouts(path: str | Path) -> list[RolloutLine]:
    """Every rollout of the file at `path`, checked; `RolloutFileError` names the first bad line."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise RolloutFileError(f"{path}: cannot read the rollout file ({exc.strerror or exc})") from None
    out: list[RolloutLine] = []
    offset = 0
    for number, raw in enumerate(blob.splitlines(keepends=True), start=1):
        if raw.strip():
            out.append(_parse_line(raw, f"{path}:{number}", path.parent, path.resolve(), offset))
        offset += len(raw)
    if not out:
        raise RolloutFileError(f"{path}: no rollouts in the file (one JSON object per line; docs/train.md)")
    return out


# -- writing -------------------------------------------------------------------------------------------

def rollout_record(trajectory: dict[str, Any] | str | os.PathLike, *, role: str, group: str | int,
                   reward: float, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """One line's object, checked as `read_rollouts` checks it (a path's trajectory is checked on reading)."""
    record: dict[str, Any] = {"trajectory": trajectory if isinstance(trajectory, dict) else str(trajectory),
                              "role": role, "group": group, "reward": reward}
    if info is not None:
        record["info"] = info
    problem = record_problem(record) or (trajectory_problem(trajectory) if isinstance(trajectory, dict) else None)
    if problem:
        raise RolloutFileError(f"rollout of {role!r}, group {group!r}: {problem}")
    return record


def write_rollouts(path: str | Path, records: Iterable[dict[str, Any]]) -> Path:
    """Write `records` (from `rollout_record`) as a rollout file, atomically."""
    lines = [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    atomic_write_text(Path(path), "".join(line + "\n" for line in lines))
    return Path(path)
