"""What one injection run did — the report both injectors return — and `inject.json`, its record on disk.

`procedural.inject` and `llm.inject_llm` each return an `InjectReport` and write it to `out/inject.json`
(`InjectReport.write`); `pool.round_metrics` reads it back through `discarded_by_strategy`. The file:

    by_strategy   {strategy: {tried, valid, kept, yield, statuses}}; the procedural injector adds the test
                  runs its candidates made and their seconds (runs, seconds)
    artifacts     one entry per artifact written (procedural) or per agent run (llm), as `--json` lists them
    run           procedural only: what the run found out about the repository (runner, tests, tracer,
                  seconds, coverage_seconds, notes) and, when it wrote nothing, why (diagnosis)

"tried" counts every candidate (procedural) or agent run (llm), "kept" those written as artifacts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from ..store.fsutil import atomic_write_json
from ..store.runs import read_inject_record, summary_name

if TYPE_CHECKING:
    from ..executor import Shard


@dataclass
class StrategyStats:
    """What one strategy's candidates (or agent runs) came to. `runs`/`seconds`: procedural only."""

    tried: int = 0
    valid: int = 0
    kept: int = 0
    runs: int | None = None
    seconds: float | None = None
    statuses: dict[str, int] = field(default_factory=dict)

    def count(self, status: str) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"tried": self.tried, "valid": self.valid, "kept": self.kept}
        if self.runs is not None:
            d["runs"] = self.runs
        if self.seconds is not None:
            d["seconds"] = round(self.seconds, 3)
        return d | {"yield": round(self.valid / self.tried, 4) if self.tried else 0.0, "statuses": self.statuses}


@dataclass
class InjectedArtifact:
    """A valid artifact the procedural injector wrote (or found already written: `reused`)."""

    id: str
    path: Path
    strategy: str
    operator: str
    target: str
    detail: str
    reused: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.path), "strategy": self.strategy, "operator": self.operator,
                "target": self.target, "detail": self.detail, "reused": self.reused}


@dataclass
class Injection:
    """One run of the LLM injector: its directory, how the agent ended, and the artifact's verdict.

    `id` is None when no artifact was written; `valid` is None when the artifact was not validated."""

    id: str | None
    path: Path
    strategy: str
    exit_status: str
    error: str | None = None
    valid: bool | None = None
    reused: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.path), "strategy": self.strategy, "exit_status": self.exit_status,
                "error": self.error, "valid": self.valid, "reused": self.reused}


@dataclass
class InjectReport:
    """What one injection run did; `inject.json` is its `to_dict()`."""

    agent: str  # "procedural" | "llm"
    requested: int
    artifacts: list[Union[InjectedArtifact, Injection]]
    stats: dict[str, StrategyStats]
    seconds: float = 0.0
    # what the procedural injector found out about the repository (empty for the LLM injector)
    runner: str = ""
    n_tests: int = 0
    coverage_seconds: float = 0.0
    tracer: str = ""
    notes: list[str] = field(default_factory=list)
    diagnosis: list[str] = field(default_factory=list)  # why nothing was written (empty when something was)

    @property
    def written(self) -> int:
        """How many artifacts the run wrote (an LLM run may end without one)."""
        return sum(1 for a in self.artifacts if a.id)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"by_strategy": {k: v.to_dict() for k, v in self.stats.items()},
                                "artifacts": [a.to_dict() for a in self.artifacts]}
        if self.runner:
            data["run"] = {"runner": self.runner, "tests": self.n_tests, "tracer": self.tracer,
                           "seconds": round(self.seconds, 3), "coverage_seconds": round(self.coverage_seconds, 3),
                           "notes": self.notes, "diagnosis": self.diagnosis}
        return data

    def write(self, out: str | Path, shard: Shard | None = None) -> Path:
        """Write `out/inject.json` (`inject-K-of-N.json` for a shard) atomically; returns its path."""
        path = Path(out) / summary_name(shard)
        atomic_write_json(path, self.to_dict())
        return path


def discarded_by_strategy(path: str | Path) -> dict[str, int]:
    """strategy → candidates (or agent runs) an injection run tried without writing an artifact, from its
    inject.json; {} when the file cannot be read."""
    data = read_inject_record(path)
    if data is None:
        return {}
    out = {}
    for strategy, counts in (data.get("by_strategy") or {}).items():
        out[strategy] = max(0, int(counts.get("tried", 0)) - int(counts.get("kept", counts.get("valid", 0))))
    return out
