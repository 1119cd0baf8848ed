"""Which GRPO groups of a run are complete, and how stale their rollouts are (`train --follow`). No torch here.

A **solver group** is an artifact directory's attempts (`round-K/inject/<repo>/<a>` or `round-K/tasks/<repo>/<a>`),
complete when its reward.json is current (`store.attempts.current_reward`: bound to the present eval.jsons) and
every attempt with a trajectory has its reward. An **injector group** is one injection run's output directory
(`round-K/inject/<repo>/`), complete once the run's record exists (`store.runs.inject_records`: the injection
ended) and every injected artifact with a trajectory has a current reward. A group is trained or dropped once:
its directory is *settled* (the ledger names it) and never scanned again.

A rollout's **staleness** is N - (the oldest step over its turns), N the trainer's newest committed step: the
oldest token decides. A turn whose version is unknown, or whose id is not this lineage's for its step (another
run's server), makes the staleness unknown. Rollout ids are content-addressed (`sha256:` + 32 hex of
trajectory.json), so a copy is recognised and a rewrite is a new rollout.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ssrkit.errors import SsrkitError
from ssrkit.store import trajectory as trajectories
from ssrkit.store.artifact import Artifact, find_artifacts
from ssrkit.store.attempts import current_reward
from ssrkit.store.runs import INJECT, TASKS, inject_records, round_numbers, round_dir
from ssrkit.train.rollouts import Rollout, scan_artifact

_IDS: dict[tuple[str, int, int], str] = {}


def rollout_id(path: Path) -> str:
    """`sha256:` + the first 32 hex digits of the file's bytes (cached by path, size and mtime)."""
    st = Path(path).stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _IDS:
        _IDS[key] = "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()[:32]
    return _IDS[key]


@dataclass
class Member:
    rollout: Rollout
    id: str
    path: str  # relative to the run
    versions: list[dict[str, Any] | None]
    server_wait_s: float = 0.0

    def staleness(self, now: int, known: dict[int, str]) -> tuple[int | None, int]:
        """(now - oldest step, or None when a turn's version is unknown or foreign; the spread max - min)."""
        steps = []
        for v in self.versions:
            if v is None or known.get(v["step"]) != v["id"]:
                return None, 0
            steps.append(v["step"])
        if not steps:
            return None, 0
        return now - min(steps), max(steps) - min(steps)


@dataclass
class Group:
    key: str  # the settled directory, relative to the run
    members: list[Member]

    def oldest(self) -> float:
        steps = [v["step"] for m in self.members for v in m.versions if v is not None]
        return min(steps) if steps else float("inf")


@dataclass
class Scan:
    groups: list[Group] = field(default_factory=list)
    pending: Counter = field(default_factory=Counter)  # why a group is not complete yet -> count


def _artifacts(directory: Path) -> list[Path]:
    try:
        return [a.path for a in find_artifacts([directory])]
    except SsrkitError:  # holds no artifact (yet)
        return []


def _member(run: Path, r: Rollout) -> Member | None:
    data = trajectories.read_or_none(r.trajectory)
    if data is None:
        return None
    return Member(r, rollout_id(r.trajectory), str(Path(r.trajectory).relative_to(run)),
                  trajectories.turn_versions(data), trajectories.server_wait(data))


def _solver_group(run: Path, art_dir: Path, scan: Scan) -> Group | None:
    rel = str(art_dir.relative_to(run))
    reward = current_reward(Artifact(art_dir))
    if reward is None:
        scan.pending["reward.json missing or stale"] += 1
        return None
    found = scan_artifact(art_dir, ["solver"])
    if any(why.startswith("unfinished attempt") for why in found.skipped):
        scan.pending["an attempt is unfinished"] += 1
        return None
    members = [m for m in (_member(run, r) for r in found.rollouts) if m is not None]
    for m in members:
        m.rollout.group = f"solver:{rel}"  # one GRPO group per directory: a task solved again is another group
    return Group(rel, members)


def _injector_group(run: Path, inject_dir: Path, scan: Scan) -> Group | None:
    if next(inject_records(inject_dir), None) is None:
        scan.pending["injection still running"] += 1
        return None
    rel = str(inject_dir.relative_to(run))
    members = []
    for art in _artifacts(inject_dir):
        if not trajectories.path_in(art).is_file():
            continue
        found = scan_artifact(art, ["injector"])
        if found.skipped and not found.rollouts:
            scan.pending["an injection's reward.json is missing or stale"] += 1
            return None
        for r in found.rollouts:
            r.group = f"injector:{rel}"
            m = _member(run, r)
            if m is not None:
                members.append(m)
    return Group("injector:" + rel, members)


def scan_run(run: Path, roles: Iterable[str], settled: set[str]) -> Scan:
    """The complete, unsettled groups of `run`, oldest round first."""
    run, roles, scan = Path(run).resolve(), set(roles), Scan()
    for n in round_numbers(run):
        for section in (INJECT, TASKS):
            for repo in sorted(p for p in (round_dir(run, n) / section).glob("*") if p.is_dir()):
                if section == INJECT and "injector" in roles and "injector:" + str(repo.relative_to(run)) \
                        not in settled:
                    group = _injector_group(run, repo, scan)
                    if group is not None:
                        scan.groups.append(group)
                if "solver" not in roles:
                    continue
                for art in _artifacts(repo):
                    if str(art.relative_to(run)) in settled:
                        continue
                    group = _solver_group(run, art, scan)
                    if group is not None:
                        scan.groups.append(group)
    return scan


@dataclass
class Batch:
    groups: list[Group]
    masked: dict[str, str]  # member id -> why it gets no loss (stays in its group's mean)
    dropped: list[tuple[Member, str, int | None]]  # (member, reason, staleness) of groups dropped whole
    staleness: dict[str, tuple[int | None, int]]  # member id -> (staleness, spread)


def select_batch(groups: list[Group], now: int, known: dict[int, str], max_groups: int, max_staleness: int,
                 unknown: str = "keep") -> Batch:
    """Whole groups, those sampled by the oldest policy first (they are the next to turn stale), up to
    `max_groups`. Stale members (and unknown ones with `unknown="drop"`) are masked; a group whose every member
    is masked is dropped whole (it would train nothing)."""
    batch = Batch([], {}, [], {})
    for group in sorted(groups, key=Group.oldest)[:max_groups]:
        masked = {}
        for m in group.members:
            age, spread = m.staleness(now, known)
            batch.staleness[m.id] = (age, spread)
            if age is not None and age > max_staleness:
                masked[m.id] = f"stale ({age} steps)"
            elif age is None and unknown == "drop":
                masked[m.id] = "unknown_version"
        if group.members and len(masked) == len(group.members):
            batch.dropped += [(m, "stale" if masked[m.id].startswith("stale") else "unknown_version",
                               batch.staleness[m.id][0]) for m in group.members]
            batch.groups.append(Group(group.key, []))  # settled, nothing to train
            continue
        batch.masked.update(masked)
        batch.groups.append(group)
    return batch
