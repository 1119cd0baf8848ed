"""The tasks an environment serves: valid artifacts by id, from artifact directories or a run's task pool."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SsrkitError
from ..store.artifact import Artifact, find_artifacts
from ..store.source import RepoSource
from .solver import artifact_source


@dataclass
class TaskSet:
    """id → (artifact, its repository). Only valid, up-to-date artifacts; `notes` says what was left out."""

    tasks: dict[str, tuple[Artifact, RepoSource]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def from_paths(cls, paths: list[Path], *, repo: RepoSource | None = None, pool: Path | None = None) -> "TaskSet":
        """Artifact directories (or directories of them) and/or the active tasks of a run's pool (`pool`).
        `repo` is every artifact's repository (default: each one's artifact.toml [repo]). An unvalidated
        artifact is an error (validate it first); an invalid one is left out with a note; none left: an error."""
        from ..solve import solvable

        found = find_artifacts([Path(p) for p in paths]) if paths else []
        if pool is not None:
            found += _pool_artifacts(Path(pool))
        if not found:
            raise SsrkitError("no artifact to serve: give artifact directories, or --pool RUN")
        items = [(a, repo or artifact_source(a)) for a in found]
        keep, notes = solvable(items, strict=True)
        out = cls(notes=notes)
        for art, source in keep:
            if art.id in out.tasks:
                raise SsrkitError(f"two artifacts have the id {art.id!r} ({out.tasks[art.id][0].path} and "
                                  f"{art.path}); serve one of them")
            out.tasks[art.id] = (art, source)
        return out

    def get(self, task: str | None) -> tuple[Artifact, RepoSource]:
        """The task named `task`; with one task served, None means it."""
        if task is None and len(self.tasks) == 1:
            return next(iter(self.tasks.values()))
        if task is None:
            raise SsrkitError(f"reset needs task=ID; this server has: {self.listing()}")
        if task not in self.tasks:
            raise SsrkitError(f"unknown task {str(task)[:200]!r}; this server has: {self.listing()}")
        return self.tasks[task]

    def listing(self, limit: int = 20) -> str:
        ids = sorted(self.tasks)
        return ", ".join(ids[:limit]) + (f" … ({len(ids)} in all)" if len(ids) > limit else "")


def _pool_artifacts(run: Path) -> list[Artifact]:
    from ..runs.pool import Pool

    if not run.is_dir():
        raise SsrkitError(f"{run}: no such run directory")
    entries = Pool.load(run).active
    if not entries:
        raise SsrkitError(f"{run}: its task pool has no active task (ssrkit pool close adds them)")
    return [Artifact(run / e.path) for e in entries]
