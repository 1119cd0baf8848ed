"""Policy versions: which weights sampled a rollout. The record `policy.json` and the served-name grammar.

Every checkpoint `ssrkit train` writes carries `CHECKPOINT/policy.json` (format `ssrkit.policy/1`, written last):

    {"format": "ssrkit.policy/1", "step": 12, "id": "3f2a9c1e0b7d", "parent": "a81c00d2e4f9",
     "lineage": "5d0e77b1c3aa", "created": "2026-12-04T10:31:02Z"}

`step` counts optimizer steps since the lineage's root; `id` is new for every written checkpoint (it tells two
checkpoints of one step apart: another run, a redone step). `ssrkit serve` serves a versioned checkpoint under a
second name, its *alias* `ssrkit-policy-s000012-3f2a9c1e0b7d` (LoRA adapters are named by it), so a client learns
from `GET /v1/models` alone which version answers: no shared filesystem, nothing beyond vLLM. A server that lists
no alias (started elsewhere, or the nccl strategy, which updates weights in place) serves an unknown version.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import SsrkitError
from .fsutil import atomic_write_json, read_json

FILE = "policy.json"
FORMAT = "ssrkit.policy/1"
ALIAS_PREFIX = "ssrkit-policy-"
_ALIAS = re.compile(rf"{re.escape(ALIAS_PREFIX)}s(\d{{6,}})-([0-9a-f]{{12}})")


class PolicyError(SsrkitError):
    """A policy.json that cannot be read or has a bad field."""


@dataclass(frozen=True)
class PolicyVersion:
    step: int
    id: str
    parent: str | None = None
    lineage: str | None = None

    def turn(self) -> dict[str, Any]:
        """What a trajectory turn records of the version that sampled it."""
        return {"step": self.step, "id": self.id}


def new_id() -> str:
    return secrets.token_hex(6)


def root_version() -> PolicyVersion:
    """Step 0 of a new lineage (a checkpoint nobody versioned yet)."""
    vid = new_id()
    return PolicyVersion(0, vid, None, vid)


def child_version(parent: PolicyVersion | None, steps: int) -> PolicyVersion:
    """The version of a checkpoint trained `steps` optimizer steps from `parent` (None: an unversioned base,
    which then counts as step 0 of the new lineage)."""
    vid = new_id()
    if parent is None:
        return PolicyVersion(steps, vid, None, vid)
    return PolicyVersion(parent.step + steps, vid, parent.id, parent.lineage or parent.id)


def read_version(checkpoint: str | Path) -> PolicyVersion | None:
    """The checkpoint's version; None when it has no policy.json; PolicyError when it cannot be read."""
    path = Path(checkpoint) / FILE
    if not path.is_file():
        return None
    try:
        data = read_json(path)
    except (OSError, ValueError) as e:
        raise PolicyError(f"{path}: cannot read the policy version ({e})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise PolicyError(f"{path}: not an {FORMAT} file")
    step, vid = data.get("step"), data.get("id")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise PolicyError(f"{path}: field 'step' must be a whole number >= 0, got {step!r}")
    if not isinstance(vid, str) or not re.fullmatch(r"[0-9a-f]{12}", vid):
        raise PolicyError(f"{path}: field 'id' must be 12 lowercase hex digits, got {vid!r}")
    return PolicyVersion(step, vid, data.get("parent"), data.get("lineage"))


def write_version(checkpoint: str | Path, version: PolicyVersion, created: str | None = None) -> None:
    """Write policy.json atomically: the checkpoint's last file (a reader that sees it sees a whole checkpoint)."""
    record = {"format": FORMAT, "step": version.step, "id": version.id, "parent": version.parent,
              "lineage": version.lineage}
    if created:
        record["created"] = created
    atomic_write_json(Path(checkpoint) / FILE, record)


def alias(version: PolicyVersion) -> str:
    """The served name of a version: `ssrkit-policy-s000012-3f2a9c1e0b7d` ([a-z0-9-]: safe as a vLLM model name,
    a LoRA name, a metrics label and in URLs)."""
    return f"{ALIAS_PREFIX}s{version.step:06d}-{version.id}"


def parse_alias(name: str) -> dict[str, Any] | None:
    """`{"step", "id"}` of an alias; None for any other name."""
    m = _ALIAS.fullmatch(name or "")
    return {"step": int(m.group(1)), "id": m.group(2)} if m else None
