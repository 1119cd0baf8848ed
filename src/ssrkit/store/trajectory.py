"""The trajectory format `ssrkit.trajectory/1` and its one reader (`agents/trajectory.py` is its one writer).

A trajectory is one agent run, saved as `trajectory.json` after every step: in an attempt directory (the
solver's) or in the artifact directory itself (the injector's). Its fields, the format tag first:

    {"format", "role", "model", "base_url", "sampling", "logprobs", "exit_status", "messages", "turns",
     "started", "ended", "seconds", "error", "limits", "submission", "info"}

`exit_status` is RUNNING while the run is in progress (a killed run leaves a valid file holding every finished
step), then one of EXIT_STATUSES. Everything that reads a trajectory (the trainer, the SFT export, the LLM
injector deciding what to redo) reads it here: a file without the tag is not a trajectory ssrkit wrote, and is
never trained on or exported.

`turns[i].policy` (added without a format change; absent in older files) is the policy version that sampled turn
i, `{"step", "id"}` (`store.policy`), or null when the server did not say: read it with `turn_versions`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import SsrkitError
from .artifact import TRAJECTORY
from .fsutil import read_json

FORMAT = "ssrkit.trajectory/1"
ROLES = ("injector", "solver")
RUNNING = "running"
SUBMITTED = "submitted"
#: how a run ends
EXIT_STATUSES = (SUBMITTED, "max_turns", "context_limit", "timeout", "format_errors", "error")
#: runs cut short by a limit or an error, or never ended: their tokens get no loss (train's `mask_statuses`)
LIMIT_STATUSES = ("max_turns", "context_limit", "timeout", "error", RUNNING)
#: runs whose reward says nothing of the policy (a sandbox error, a killed run): left out of their group's mean
#: too (train's `drop_statuses`)
DROP_STATUSES = ("error", RUNNING)


class TrajectoryError(SsrkitError):
    """A trajectory.json that cannot be read, or is not an ssrkit.trajectory/1 file."""


def path_in(directory: Path) -> Path:
    """Where the trajectory of an attempt (or of an LLM injection) is kept in its directory."""
    return Path(directory) / TRAJECTORY


def read(path: str | Path) -> dict[str, Any]:
    """The trajectory as a dict, its format tag checked; TrajectoryError otherwise."""
    try:
        data = read_json(Path(path))
    except (OSError, ValueError) as e:
        raise TrajectoryError(f"{path}: cannot read the trajectory ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise TrajectoryError(f"{path}: not an {FORMAT} file")
    return data


def read_or_none(path: str | Path) -> dict[str, Any] | None:
    """`read`, or None for a file that is missing, unreadable or not a trajectory (for scans over many)."""
    try:
        return read(path)
    except TrajectoryError:
        return None


def exit_status(path: str | Path) -> str | None:
    """The trajectory's exit status ("unknown" when it records none); None when it is not a readable trajectory."""
    data = read_or_none(path)
    return None if data is None else str(data.get("exit_status") or "unknown")


def role(path: str | Path) -> str | None:
    """The trajectory's role (a solver's when it records none); None when it is not a readable trajectory."""
    data = read_or_none(path)
    return None if data is None else str(data.get("role") or "solver")


def ended(path: str | Path) -> bool:
    """The run ended: a readable trajectory whose exit status is known and not RUNNING."""
    data = read_or_none(path)
    return data is not None and data.get("exit_status") not in (None, RUNNING)


def turn_versions(data: dict[str, Any]) -> list[dict[str, Any] | None]:
    """The policy version of each turn ({"step", "id"}), None where unknown (null, or a file from before versions)."""
    out: list[dict[str, Any] | None] = []
    for turn in data.get("turns") or []:
        v = turn.get("policy") if isinstance(turn, dict) else None
        ok = isinstance(v, dict) and isinstance(v.get("step"), int) and isinstance(v.get("id"), str)
        out.append({"step": v["step"], "id": v["id"]} if ok else None)
    return out


def server_wait(data: dict[str, Any]) -> float:
    """Seconds the run's turns waited for a server that was down."""
    return float(sum(t.get("server_wait_s", 0) or 0 for t in data.get("turns") or [] if isinstance(t, dict)))
