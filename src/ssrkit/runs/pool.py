"""Run directories and the task pool: what carries over from one self-play round to the next (SPEC §10).

Layout of a run directory::

    RUN/ssrkit.toml            resolved configuration of the run
    RUN/pool.json              the task pool (validated artifacts kept across rounds)
    RUN/metrics.csv            one row per finished round
    RUN/round-001/inject/<repo>/<id>/  artifacts injected this round, one folder per repository
    RUN/round-001/tasks/<repo>/<id>/   pool artifacts carried into this round (fresh copies, no attempts)
    RUN/round-001/higher/<repo>/<id>/  higher-order artifacts made from this round's failed attempts
    RUN/round-001/round.json           this round's numbers (the same as its metrics.csv row)
    RUN/round-001/policy/              the checkpoint trained after this round (its train_config.toml names the
                                       checkpoint that played the round), when the run trains
    RUN/round-001/learning.json        the learning panel's measures of this round (`ssrkit.learning`)

Artifacts are found at any depth below a section (`<repo>/` is a convention that lets a recipe run each
repository's steps on their own); hidden entries (`.staging/`, `.<id>.partial/`) are never artifacts.
`<repo>` is the repository directory's name (`repo_label`). A pool artifact is copied into each round that
uses it, so every round's attempts, rewards and grades stay on disk side by side and any round can be
re-graded on its own.
"""

from __future__ import annotations

import csv
import io
import json
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..store.artifact import CORE_FILES, LOGS, METADATA, VALIDATION, Artifact, check_name, find_artifacts
from ..store.attempts import current_reward, scored_attempts
from ..errors import SsrkitError
from ..store.fsutil import atomic_write_json, atomic_write_text, read_json
from ..inject.summary import discarded_by_strategy
from ..store.runs import (HIGHER, INJECT, METRICS, POOL, ROUND_SUMMARY, SECTIONS, TASKS, inject_records, round_dir,
                         round_numbers)
from ..store.source import RepoSource

METRIC_COLUMNS = [
    "round", "injected", "valid", "validity_rate", "validity_by_strategy", "tasks", "attempts", "solved",
    "solve_rate", "mean_artifact_solve_rate", "injector_reward_mean", "solver_reward_mean", "higher_order",
    "pool_size", "pool_retired", "validate_seconds", "solve_seconds",
]


def repo_label(source: RepoSource | None) -> str:
    """The folder name of a repository inside a round's sections: the directory's name, or the image's."""
    if source is None:
        return "unknown"
    raw = source.path if source.kind == "local" else source.image
    name = Path(str(raw).rstrip("/")).name if source.kind == "local" else str(raw)
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".") or "repo"


def round_artifacts(run: Path, n: int, sections: tuple[str, ...] = SECTIONS) -> dict[str, list[Artifact]]:
    """The artifacts of one round by section (empty lists for sections with none)."""
    out: dict[str, list[Artifact]] = {}
    for s in sections:
        d = round_dir(run, n) / s
        try:
            out[s] = find_artifacts([d]) if d.is_dir() and any(d.iterdir()) else []
        except SsrkitError:
            out[s] = []
    return out


# -- the pool ---------------------------------------------------------------------------------------

@dataclass
class PoolEntry:
    id: str
    path: str  # the artifact's first home, relative to the run directory
    strategy: str
    order: int
    added_round: int
    solve_rates: dict[str, float] = field(default_factory=dict)  # round number (as text) → solve rate
    retired: str | None = None  # why, once retired
    repo: str = ""  # repo_label of its repository (the <repo> folder of the rounds it is carried into)
    retired_round: int | None = None  # the round whose close retired it

    def in_pool_after(self, round_no: int) -> bool:
        """Whether it was an active pool member once round `round_no` was closed."""
        return self.added_round <= round_no and (self.retired_round is None or self.retired_round > round_no)

    @property
    def active(self) -> bool:
        return self.retired is None


@dataclass
class Pool:
    entries: dict[str, PoolEntry] = field(default_factory=dict)

    @classmethod
    def load(cls, run: Path) -> "Pool":
        p = Path(run) / POOL
        if not p.is_file():
            return cls()
        data = read_json(p)
        entries = [PoolEntry(**e) for e in data.get("entries", [])]
        for e in entries:  # they name where copies are written and removed: names and paths inside the run only
            check_name(e.id, f"{p}: id")
            if e.repo:
                check_name(e.repo, f"{p}: repo")
            rel = Path(e.path)
            if rel.is_absolute() or ".." in rel.parts:
                raise SsrkitError(f"{p}: path {e.path!r} of {e.id} is not inside the run directory; fix or delete it")
        return cls({e.id: e for e in entries})

    def save(self, run: Path) -> None:
        atomic_write_json(Path(run) / POOL, {"entries": [asdict(e) for e in self.entries.values()]})

    @property
    def active(self) -> list[PoolEntry]:
        return [e for e in self.entries.values() if e.active]

    def add(self, artifact: Artifact, run: Path, round_no: int) -> bool:
        """Add a valid artifact (once); returns whether it was new."""
        if artifact.id in self.entries:
            return False
        meta = artifact.metadata
        self.entries[artifact.id] = PoolEntry(
            id=artifact.id, path=str(artifact.path.resolve().relative_to(Path(run).resolve())),
            strategy=meta.strategy, order=meta.order, added_round=round_no, repo=repo_label(meta.repo))
        return True

    def record(self, artifact_id: str, round_no: int, solve_rate: float) -> None:
        if artifact_id in self.entries:
            self.entries[artifact_id].solve_rates[str(round_no)] = solve_rate

    def retire(self, after: int, round_no: int | None = None) -> list[str]:
        """Retire artifacts solved always (too easy) or never (too hard) in their last `after` rounds."""
        retired = []
        for e in self.active:
            rates = [e.solve_rates[k] for k in sorted(e.solve_rates, key=int)][-after:]
            if len(rates) < after:
                continue
            if all(r >= 1.0 for r in rates):
                e.retired = f"always solved in its last {after} rounds"
            elif all(r <= 0.0 for r in rates):
                e.retired = f"never solved in its last {after} rounds"
            else:
                continue
            e.retired_round = round_no
            retired.append(e.id)
        return retired


def select_tasks(run: Path, round_no: int, *, n_new: int, old_ratio: float, seed: int = 0) -> list[Path]:
    """Copy active pool artifacts into round-N/tasks/<repo>/ so old and new mix in the given ratio.

    With `old_ratio` r and `n_new` new artifacts, about r/(1-r)·n_new old ones are carried (all of them
    when the pool is smaller). Idempotent: a re-run copies nothing twice.
    """
    if not 0.0 <= old_ratio < 1.0:
        raise SsrkitError("--old-ratio must be in [0, 1)")
    pool = Pool.load(run)
    current = set()
    for arts in round_artifacts(run, round_no, (INJECT,)).values():
        current.update(a.id for a in arts)
    candidates = [e for e in pool.active if e.id not in current and e.added_round < round_no]
    want = round(old_ratio / (1.0 - old_ratio) * max(n_new, 1)) if old_ratio else 0
    rng = random.Random(f"{seed}-{round_no}")
    chosen = sorted(rng.sample(candidates, min(want, len(candidates))), key=lambda e: e.id)
    dest_root = round_dir(run, round_no) / TASKS
    out = []
    for e in chosen:
        dest = dest_root / (e.repo or "unknown") / e.id
        if not (dest / METADATA).is_file() and not (dest / VALIDATION).is_file():
            copy_task(Path(run) / e.path, dest)
        out.append(dest)
    return out


def copy_task(src: Path, dest: Path) -> None:
    """Copy an artifact's definition and its validation to a new home.

    Not its attempts or rewards (the new round makes its own), nor the injector's trajectory.json: the
    injection was rewarded and trained on in the round that made it, and a copy would train it again.
    """
    tmp = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in (*CORE_FILES, METADATA, VALIDATION):
        if (src / name).is_file():
            shutil.copy2(src / name, tmp / name)
    if (src / LOGS).is_dir():
        shutil.copytree(src / LOGS, tmp / LOGS)
    tmp.rename(dest)  # atomic: a killed copy leaves only the hidden .partial, redone next time


# -- closing a round ---------------------------------------------------------------------------------

def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def made_before(run: Path, round_no: int) -> set[str]:
    """The ids of the artifacts made (injected or higher-order) in the rounds before `round_no`."""
    return {a.id for n in round_numbers(run) if n < round_no
            for arts in round_artifacts(run, n, (INJECT, HIGHER)).values() for a in arts}


def round_metrics(run: Path, round_no: int, pool: Pool | None = None) -> dict[str, Any]:
    """The numbers of one round, recomputed from the artifact files on disk (and pool.json for the pool).

    injected / valid / validity_rate: injection attempts of the round (artifacts in inject/ plus the
    candidates or agent runs the injector discarded, from each inject.json or a shard's inject-K-of-N.json)
    and how many gave a valid artifact; validity_by_strategy the same per strategy ({strategy:
    "valid/injected"}). tasks: valid artifacts solved this round (new and carried). attempts / solved /
    solve_rate: over every attempt of those tasks; mean_artifact_solve_rate: the mean of their solve rates.
    injector_reward_mean: over this round's new artifacts (invalid ones count −1); solver_reward_mean: over
    every attempt. higher_order: valid higher-order artifacts new this round (one an earlier round made
    already, the same failed fix of a carried task, is not counted again). pool_size / pool_retired: the
    pool once this round was closed. validate_seconds: validation time of the new artifacts; solve_seconds:
    solver plus grading time of every attempt (both summed over artifacts and attempts: sandbox time, not
    wall time).
    """
    arts = round_artifacts(run, round_no)
    injected = arts[INJECT]
    by_strategy: dict[str, list[int]] = {}
    valid_new = 0
    validate_seconds = 0.0
    for a in injected:
        v = a.validation_if_current() or {}  # a verdict on other files counts as none
        ok = bool(v.get("valid"))
        valid_new += ok
        validate_seconds += float(v.get("seconds", 0.0))
        st = by_strategy.setdefault(a.metadata.strategy, [0, 0])
        st[0] += ok
        st[1] += 1
    # candidates (or agent runs) that injection tried and discarded count against validity too
    for summary in inject_records(round_dir(run, round_no) / INJECT):
        for strategy, discarded in discarded_by_strategy(summary).items():
            by_strategy.setdefault(strategy, [0, 0])[1] += discarded
    injected_total = sum(t for _, t in by_strategy.values())
    tasks = [a for s in (INJECT, TASKS) for a in arts[s] if a.is_valid]
    attempts = solved = 0
    rates: list[float] = []
    inj_rewards: list[float] = []
    sol_rewards: list[float] = []
    solve_seconds = 0.0
    for section, a in [*((INJECT, a) for a in arts[INJECT]), *((TASKS, a) for a in arts[TASKS])]:
        r = current_reward(a)
        if r:
            if section == INJECT:  # the injector acted this round only on its new artifacts
                inj_rewards.append(float(r["injector_reward"]))
            if r.get("valid"):
                sol_rewards.extend(s.reward for s in scored_attempts(a) if s.reward is not None)
                attempts += int(r["n_attempts"])
                solved += int(r["n_solved"])
                rates.append(float(r["solve_rate"]))
        for s in scored_attempts(a):
            ev = s.eval or {}
            solver_seconds = (ev.get("solver_info") or {}).get("seconds", 0.0)
            solve_seconds += float(ev.get("seconds", 0.0) or 0.0) + float(solver_seconds or 0.0)
    earlier = made_before(run, round_no) if arts[HIGHER] else set()
    higher_valid = len({a.id for a in arts[HIGHER] if a.is_valid and a.id not in earlier})
    pool = pool or Pool.load(run)
    return {
        "round": round_no,
        "injected": injected_total,
        "valid": valid_new,
        "validity_rate": round(valid_new / injected_total, 4) if injected_total else None,
        "validity_by_strategy": {k: f"{v}/{t}" for k, (v, t) in sorted(by_strategy.items()) if t},
        "tasks": len(tasks),
        "attempts": attempts,
        "solved": solved,
        "solve_rate": round(solved / attempts, 4) if attempts else None,
        "mean_artifact_solve_rate": _mean(rates),
        "injector_reward_mean": _mean(inj_rewards),
        "solver_reward_mean": _mean(sol_rewards),
        "higher_order": higher_valid,
        "pool_size": sum(e.in_pool_after(round_no) for e in pool.entries.values()),
        "pool_retired": sum(e.retired_round is not None and e.retired_round <= round_no
                            for e in pool.entries.values()),
        "validate_seconds": round(validate_seconds, 2),
        "solve_seconds": round(solve_seconds, 2),
    }


def close_round(run: Path, round_no: int, *, retire_after: int = 2) -> dict[str, Any]:
    """Update the pool from a finished round and write its metrics (idempotent: re-closing rewrites the row)."""
    run = Path(run)
    if not round_dir(run, round_no).is_dir():
        raise SsrkitError(f"{round_dir(run, round_no)} does not exist")
    pool = Pool.load(run)
    arts = round_artifacts(run, round_no)
    for a in [*arts[INJECT], *arts[HIGHER]]:
        if a.is_valid:
            pool.add(a, run, round_no)
    for a in [*arts[INJECT], *arts[TASKS]]:
        r = current_reward(a)
        if r and r.get("valid") and r.get("n_attempts"):
            pool.record(a.id, round_no, float(r["solve_rate"]))
    pool.retire(retire_after, round_no)
    pool.save(run)
    row = round_metrics(run, round_no, pool)
    atomic_write_json(round_dir(run, round_no) / ROUND_SUMMARY, row)
    write_metrics_row(run, row)
    return row


def read_metrics(run: Path) -> list[dict[str, str]]:
    p = Path(run) / METRICS
    if not p.is_file():
        return []
    with p.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _csv_cell(value: Any) -> Any:
    """A metrics value as a CSV cell: None empty, a mapping as JSON (validity_by_strategy)."""
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True) if isinstance(value, dict) else value


def write_metrics_row(run: Path, row: dict[str, Any]) -> None:
    """Insert or replace the row of `row['round']`, keeping rounds in order (rewritten atomically)."""
    rows = [r for r in read_metrics(run) if int(r["round"]) != int(row["round"])]
    rows.append({k: _csv_cell(row.get(k)) for k in METRIC_COLUMNS})
    rows.sort(key=lambda r: int(r["round"]))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=METRIC_COLUMNS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    atomic_write_text(Path(run) / METRICS, buf.getvalue())
