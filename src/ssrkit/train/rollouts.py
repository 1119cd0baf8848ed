"""Artifact directories on disk -> `Rollout`s: one trajectory, its role, its GRPO group and its reward.

Solver attempts (`attempts/NNN/trajectory.json`) are grouped per artifact; injector rollouts (the artifact's own
`trajectory.json`) per repository snapshot (repository path or image, base commit). Rewards come from
`reward.json` (`injector_reward`, only while `ssrkit.attempts.current_reward` says it was computed from the present
files) and, per attempt, from `ssrkit.attempts.scored_attempts` (paired by attempt name; an unfinished attempt, or
one whose eval.json judged other files, gets none). Only JSON/TOML is read here; token ids
are loaded later, one trajectory at a time (`examples.py`).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ssrkit.artifact import METADATA, REWARD, TRAJECTORY, Artifact
from ssrkit.artifact import find_artifacts as find
from ssrkit.attempts import STALE, current_reward, scored_attempts
from ssrkit.errors import SsrkitError
from ssrkit.train.errors import NothingToTrain, TrainError

log = logging.getLogger("ssrkit.train")

@dataclass
class Rollout:
    role: str  # "solver" | "injector"
    trajectory: Path  # trajectory.json
    artifact: Path
    group: str  # GRPO group key
    reward: float
    exit_status: str

    @property
    def name(self) -> str:
        return str(self.trajectory)


@dataclass
class RolloutScan:
    rollouts: list[Rollout] = field(default_factory=list)
    artifacts: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> count


def find_artifacts(paths: Iterable[Path]) -> list[Path]:
    """Artifact directories named by `paths`: each is an artifact or a folder searched for artifacts below it
    (the same rules as every other command; a file stands for its directory, e.g. a glob over */reward.json)."""
    found: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise TrainError(f"no such file or directory: {path}")
        try:
            found.update(a.path.resolve() for a in find([path.parent if path.is_file() else path]))
        except SsrkitError:
            continue  # holds no artifact; read_rollouts says so when nothing at all was found
    return sorted(found)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def snapshot_key(artifact: Artifact) -> str:
    """The injector's group: the repository snapshot the injection started from (artifact.toml's repository and
    base commit; an artifact without readable metadata is a group of its own)."""
    try:
        meta = artifact.metadata
    except SsrkitError:
        return f"artifact:{artifact.path}"
    source = meta.repo.label if meta.repo is not None else ""
    if not source and not meta.base_commit:
        return f"artifact:{artifact.path}"
    return f"{source}@{meta.base_commit or ''}"


def _exit_status(trajectory: Path) -> str | None:
    """The trajectory's exit status, read without keeping the (possibly large) file around."""
    data = _read_json(trajectory)
    if not isinstance(data, dict):
        return None
    return str(data.get("exit_status") or "unknown")


def scan_artifact(
    artifact: Path, roles: Iterable[str] = ("solver", "injector"), scan: RolloutScan | None = None
) -> RolloutScan:
    scan = scan if scan is not None else RolloutScan()
    roles = set(roles)
    scan.artifacts += 1
    art = Artifact(artifact)
    reward = current_reward(art)

    if "injector" in roles and (artifact / TRAJECTORY).is_file():
        status = _exit_status(artifact / TRAJECTORY)
        if status is None:
            scan.skipped["unreadable trajectory.json"] += 1
        elif reward is None and (artifact / REWARD).is_file():
            scan.skipped["injector trajectory whose reward.json is stale (rerun ssrkit reward)"] += 1
        elif reward is None or not isinstance(reward.get("injector_reward"), (int, float)):
            scan.skipped["injector trajectory without reward.json"] += 1
        else:
            scan.rollouts.append(
                Rollout(
                    "injector",
                    artifact / TRAJECTORY,
                    artifact,
                    "injector:" + snapshot_key(art),
                    float(reward["injector_reward"]),
                    status,
                )
            )

    if "solver" in roles:
        try:
            artifact_id = ((artifact / METADATA).is_file() and art.metadata.id) or str(artifact)
        except SsrkitError:
            artifact_id = str(artifact)
        for attempt in scored_attempts(art):
            if not attempt.trajectory.is_file():
                scan.skipped["attempt without trajectory.json"] += 1  # e.g. a baseline solver or --patch
                continue
            if attempt.reward is None:
                scan.skipped["attempt whose eval.json judged other files: no reward" if attempt.source == STALE
                             else "unfinished attempt (no eval.json): no reward"] += 1
                continue
            status = _exit_status(attempt.trajectory)
            if status is None:
                scan.skipped["unreadable trajectory.json"] += 1
                continue
            scan.rollouts.append(
                Rollout("solver", attempt.trajectory, artifact, f"solver:{artifact_id}", attempt.reward, status)
            )
    return scan


def read_rollouts(paths: Iterable[Path], roles: Iterable[str] = ("solver", "injector")) -> RolloutScan:
    """Every rollout with a reward below `paths` (artifact dirs or folders of them), in a stable order."""
    artifacts = find_artifacts(paths)
    if not artifacts:
        raise NothingToTrain("no artifacts found in the given paths")
    scan = RolloutScan()
    roles = list(roles)
    for artifact in artifacts:
        scan_artifact(artifact, roles, scan)
    for reason, count in sorted(scan.skipped.items()):
        log.info("skipped %d: %s", count, reason)
    return scan
