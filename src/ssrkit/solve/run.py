"""One entry for a batch of solving: what `ssrkit solve` asks, checked and carried out (`SolveBatch`).

Which artifacts may be solved, the engine's options (the configuration, then the flags), the solver and its
model client, the executor, and whether the attempts run or only their saved fixes are graded again: decided
here, once, for the command line and any other caller. The caller keeps the showing: `watch` is told when
the attempts start and gives back what to call as each one is graded.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Iterator

from ..executor import executor_from_config
from ..store.artifact import Artifact
from ..store.config import Config
from ..store.source import RepoSource
from .engine import Engine, SolveOptions, solvable
from .solvers import Solver

#: `watch(label)`: entered when the attempts start; it yields what to call with each attempt's record, or None
Watch = Callable[[str], ContextManager[Callable[[dict[str, Any]], None] | None]]


@dataclass
class SolveRequest:
    """How to solve, as `ssrkit solve`'s flags say it; None: the configuration's, else the default."""

    solver: str = "llm"
    attempts: int | None = None  # finished attempts each artifact must have
    redo: bool = False  # run attempts 1..attempts again
    regrade: bool = False  # grade the saved fixes again; run no solver
    jobs: int | None = None
    executor: str | None = None
    ray_address: str | None = None
    timeout: float | None = None  # seconds per test run
    seed: int = 0
    backend: str | None = None
    max_turns: int | None = None  # llm
    budget_runs: int | None = None  # repair
    partial: bool = False  # repair
    model: dict[str, Any] = field(default_factory=dict)  # llm: `client_from_config`'s flags (base_url, model, ...)


@contextmanager
def unwatched(label: str) -> Iterator[None]:
    yield None


class SolveBatch:
    """The artifacts of one solve: the solvable ones of `items` (`notes`: one per invalid one left out; an
    unvalidated or stale one raises), and the engine that runs their attempts. `strict`: an error, not nothing
    to do, when none is valid (one artifact named, or a patch to grade)."""

    def __init__(self, items: list[tuple[Artifact, RepoSource]], cfg: Config, request: SolveRequest, *,
                 strict: bool):
        r = self.request = request
        self.cfg = cfg
        self.options = SolveOptions.from_config(cfg, backend=r.backend, jobs=r.jobs, timeout=r.timeout, seed=r.seed,
                                                attempts=r.attempts)
        self.engine = Engine(self.options)
        self.items, self.notes = solvable(items, strict=strict)

    def run(self, watch: Watch = unwatched) -> list[dict[str, Any]]:
        """Each artifact solved up to its attempts (or, with `regrade`, its saved fixes graded again): the
        records of the attempts made or graded now."""
        r = self.request
        solver = None if r.regrade else self.solver()
        with executor_from_config(self.cfg, r.executor, r.ray_address, self.options.jobs) as ex:
            with watch("regrade" if solver is None else f"solve ({r.solver})") as on_done:
                if solver is None:
                    return self.engine.regrade(self.items, on_done=on_done, executor=ex)
                return self.engine.solve(self.items, solver, redo=r.redo, on_done=on_done, executor=ex)

    def solver(self) -> Solver:
        """The request's solver, with its model client (llm) and agent settings."""
        from ..agents.endpoints import client_from_config
        from ..agents.loop import AgentConfig
        from .solvers import make_solver

        r = self.request
        client = client_from_config(self.cfg, "solve", **r.model) if r.solver == "llm" else None
        return make_solver(r.solver, client=client, budget_runs=r.budget_runs, partial=r.partial,
                           agent=AgentConfig.from_config(self.cfg, max_turns=r.max_turns))
