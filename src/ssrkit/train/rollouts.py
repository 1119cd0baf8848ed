"""Artifact directories and rollout files on disk -> `Rollout`s: one trajectory, its role, its GRPO group and its
reward.

A path ending in `.jsonl` is a rollout file (`ssrkit.rollout_file`: one rollout a line, from any source, role and
group given); every other path is an artifact directory or a folder searched for them. In artifact directories,
solver attempts (`attempts/NNN/trajectory.json`) are grouped per artifact; injector rollouts (the artifact's own
`trajectory.json`) per repository snapshot (repository path or image, base commit). Rewards come from
`reward.json` (`injector_reward`, only while `ssrkit.store.attempts.current_reward` says it was computed from
the present files) and, per attempt, from `ssrkit.store.attempts.scored_attempts` (paired by attempt name; an
unfinished attempt, or one whose eval.json judged other files, gets none). Only JSON/TOML is read here; token ids
are loaded later, one trajectory at a time (`examples.py`).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ssrkit.store import trajectory as trajectories
from ssrkit.store.artifact import METADATA, REWARD, Artifact
from ssrkit.store.artifact import find_artifacts as find
from ssrkit.store.attempts import STALE, current_reward, scored_attempts
from ssrkit.errors import SsrkitError
from ssrkit.rollout_file import RolloutFileError, RolloutLine, is_rollout_file
from ssrkit.rollout_file import read_rollouts as read_rollout_file
from ssrkit.train.config import ROLES  # the roles of rollouts in artifact directories
from ssrkit.train.errors import NothingToTrain, TrainError

log = logging.getLogger("ssrkit.train")
#: a trajectory.json that cannot be read or is not an ssrkit.trajectory/1 file: never trained on
UNREADABLE = f"unreadable trajectory.json (or not an {trajectories.FORMAT} file)"

@dataclass
class Rollout:
    role: str  # "solver" | "injector" | a rollout file's task name
    trajectory: Path  # trajectory.json, or the rollout file holding it inline
    source: Path  # the artifact directory, or the rollout file
    group: str  # GRPO group key
    reward: float
    exit_status: str
    line: RolloutLine | None = None  # where a rollout file gave it

    @property
    def name(self) -> str:
        return self.line.where if self.line is not None else str(self.trajectory)

    def load(self) -> dict[str, Any]:
        """The trajectory (one inline in a rollout file is read again from its line: none is held in memory)."""
        return self.line.load() if self.line is not None else trajectories.read(self.trajectory)


@dataclass
class RolloutScan:
    rollouts: list[Rollout] = field(default_factory=list)
    artifacts: int = 0
    files: int = 0  # rollout files
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    roles_seen: set[str] = field(default_factory=set)


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


def scan_artifact(artifact: Path, roles: Iterable[str] = ROLES, scan: RolloutScan | None = None) -> RolloutScan:
    scan = scan if scan is not None else RolloutScan()
    roles = set(roles)
    scan.artifacts += 1
    art = Artifact(artifact)
    reward = current_reward(art)

    injection = trajectories.path_in(artifact)
    if "injector" in roles and injection.is_file():
        status = trajectories.exit_status(injection)  # read without keeping the (possibly large) file around
        if status is None:
            scan.skipped[UNREADABLE] += 1
        elif reward is None and (artifact / REWARD).is_file():
            scan.skipped["injector trajectory whose reward.json is stale (rerun ssrkit reward)"] += 1
        elif reward is None or not isinstance(reward.get("injector_reward"), (int, float)):
            scan.skipped["injector trajectory without reward.json"] += 1
        else:
            scan.roles_seen.add("injector")
            scan.rollouts.append(
                Rollout(
                    "injector",
                    injection,
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
            status = trajectories.exit_status(attempt.trajectory)
            if status is None:
                scan.skipped[UNREADABLE] += 1
                continue
            scan.roles_seen.add("solver")
            scan.rollouts.append(
                Rollout("solver", attempt.trajectory, artifact, f"solver:{artifact_id}", attempt.reward, status)
            )
    return scan


def scan_rollout_file(path: Path, roles: set[str] | None, scan: RolloutScan) -> RolloutScan:
    """The rollouts of one rollout file (checked whole first: a bad line stops the run, naming FILE:LINE)."""
    try:
        lines = read_rollout_file(path)
    except RolloutFileError as exc:
        raise TrainError(str(exc)) from None
    scan.files += 1
    for line in lines:
        if roles is None or line.role in roles:
            scan.rollouts.append(
                Rollout(line.role, line.trajectory, path, f"{line.role}:{line.group}", line.reward,
                        line.exit_status, line)
            )
        scan.roles_seen.add(line.role)
    return scan


def read_rollouts(paths: Iterable[Path], roles: Iterable[str] = ()) -> RolloutScan:
    """Every rollout with a reward in `paths` (rollout files `*.jsonl`, artifact dirs or folders of them), in a
    stable order. `roles`: only those roles or task names (empty: all); one that no rollout has is an error."""
    paths = [Path(p) for p in paths]
    files = [p for p in paths if is_rollout_file(p)]
    artifacts = find_artifacts([p for p in paths if p not in files])
    if not artifacts and not files:
        raise NothingToTrain("no artifacts or rollout files (*.jsonl) found in the given paths")
    wanted = set(roles) or None
    scan = RolloutScan()
    for path in files:
        scan_rollout_file(path, wanted, scan)
    for artifact in artifacts:
        scan_artifact(artifact, wanted or ROLES, scan)
    for reason, count in sorted(scan.skipped.items()):
        log.info("skipped %d: %s", count, reason)
    unknown = sorted((wanted or set()) - scan.roles_seen - (set(ROLES) if artifacts else set()))  # a typo
    if unknown:
        raise TrainError(f"--roles {','.join(unknown)}: no rollout has that role (found: "
                         f"{', '.join(sorted(scan.roles_seen)) or 'none'})")
    return scan
