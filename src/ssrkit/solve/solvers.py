"""The solvers (SPEC §6): ways to produce a fix in the solver's sandbox, and their registry.

`solve.py` prepares the sandbox (original + bug + weakened tests, fresh history), runs one of these and grades
what it left; a solver only works in the sandbox. The baselines (oracle, null, repair) need no model; the LLM
solver is the agent loop with the solver prompt.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import patch as patches
from ..store.artifact import BUG_DIFF, Artifact
from ..errors import SsrkitError
from ..store import trajectory as trajectories
from ..sandbox.base import Sandbox
from ..verdict.patterns import DEFAULT_TEST_PATTERNS
from .repair import DEFAULT_BUDGET_RUNS

if TYPE_CHECKING:
    from ..agents import Agent, AgentConfig, ModelClient, Trajectory


@dataclass
class SolveContext:
    artifact: Artifact
    sandbox: Sandbox
    attempt: str
    out_dir: Path
    seed: int
    test_diff: str
    timeout: float  # the test budget per run (for solvers that run tests)
    #: what counts as a test file (`[validate] test_patterns`, as grading reads it): never edited as code
    test_patterns: list[str] = field(default_factory=lambda: list(DEFAULT_TEST_PATTERNS))


@dataclass
class SolverOutput:
    #: the fix; None means "whatever the solver left in the sandbox" (the usual case)
    fix_diff: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    #: the agent's trajectory, when the solver ran one: the engine records in it the size of the fix it grades
    trajectory: "Trajectory | None" = None


class Solver(ABC):
    """A way to produce a fix in the solver's sandbox. Implementations must be safe to call from threads."""

    name = "?"

    @abstractmethod
    def solve(self, ctx: SolveContext) -> SolverOutput:
        """Work in `ctx.sandbox`; return the fix (or None: the sandbox's diff is the fix)."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class OracleSolver(Solver):
    """The reverse of `bug_inject.diff`: must always succeed (a check of the grading itself)."""

    name = "oracle"

    def solve(self, ctx: SolveContext) -> SolverOutput:
        ctx.sandbox.apply_patch(patches.reverse(ctx.artifact.bug_diff), label=f"reversed {BUG_DIFF}")
        return SolverOutput()


class NullSolver(Solver):
    """The empty patch: must always fail."""

    name = "null"

    def solve(self, ctx: SolveContext) -> SolverOutput:
        return SolverOutput(fix_diff="")


class LLMSolver(Solver):
    """The agent loop with the solver prompt against an OpenAI-compatible endpoint (`ssrkit.agents`).

    The task is the fixed template around the reversed `test_weaken.diff`; the trajectory is saved in the
    attempt directory after every step. The fix is whatever the agent left in the sandbox, whatever its exit
    status (the engine's diff against the solver's starting state, commits included): grading decides. Model errors (endpoint down, unknown model) abort the run instead of being
    recorded as failed attempts, so they never turn into rewards.
    """

    name = "llm"

    def __init__(self, client: Any, config: Any = None):
        self.client = client
        self.config = config

    @classmethod
    def from_options(cls, *, client: Any = None, agent: "AgentConfig | None" = None, **_: Any) -> "LLMSolver":
        """`client`: the `ModelClient` (`agents.endpoints.client_from_config`); `agent`: its limits."""
        if client is None:
            raise SsrkitError("the llm solver needs a model: --base-url and --model (e.g. --base-url "
                              "http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct)")
        return cls(client, agent)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.client.describe()}

    def solve(self, ctx: SolveContext) -> SolverOutput:
        from ..agents import solver_task

        task = solver_task(ctx.test_diff)
        traj = run_llm_solver(ctx.sandbox, self.client, task, ctx.out_dir, config=self.config,
                              info={"artifact": ctx.artifact.id, "attempt": ctx.attempt})
        info: dict[str, Any] = {"exit_status": traj.exit_status, "turns": len(traj.turns)}
        if traj.error:
            info["error"] = traj.error
        return SolverOutput(info=info, trajectory=traj)


class RepairSolver(Solver):
    """Search-based program repair with no model (`ssrkit.solve.repair.find_repair`): fault localization from the
    failing tests' coverage, inverse mutations at the most suspicious lines, the first patch with which every
    test passes. Bugs it fixes are trivially easy — a useful filter for a task pool."""

    name = "repair"

    def __init__(self, budget_runs: int = DEFAULT_BUDGET_RUNS, partial: bool = False):
        if budget_runs < 1:
            raise SsrkitError("the repair budget must be at least 1 test run")
        self.budget_runs = budget_runs
        self.partial = partial  # without a fix, submit the best partial one (a failed attempt that changed code)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "budget_runs": self.budget_runs, **({"partial": True} if self.partial else {})}

    def solve(self, ctx: SolveContext) -> SolverOutput:
        from .repair import find_repair

        art = ctx.artifact
        r = find_repair(ctx.sandbox, tests_diff=ctx.test_diff, test_script=art.test_script,
                        test_parser=art.test_parser, timeout=ctx.timeout, budget_runs=self.budget_runs,
                        seed=ctx.seed, test_patterns=ctx.test_patterns)
        info: dict[str, Any] = {"found": r.fix_diff is not None, "runs": r.runs, "candidates": r.candidates,
                                "note": r.note, "search_seconds": round(r.seconds, 3)}
        fix = r.fix_diff or ""
        if r.fix_diff is None and self.partial and r.partial:
            fix = r.partial
            info["submitted_partial"] = r.partial_note
        return SolverOutput(fix_diff=fix, info=info)


#: name → factory(**options); only solvers whose code exists on this branch are registered.
SOLVERS: dict[str, Callable[..., Solver]] = {
    "oracle": lambda **_: OracleSolver(),
    "null": lambda **_: NullSolver(),
    "llm": LLMSolver.from_options,
    "repair": lambda budget_runs=None, partial=False, **_: RepairSolver(budget_runs or DEFAULT_BUDGET_RUNS,
                                                                               partial=bool(partial)),
}


def register_solver(name: str, factory: Callable[..., Solver]) -> None:
    SOLVERS[name] = factory


def make_solver(name: str, **options: Any) -> Solver:
    factory = SOLVERS.get(name)
    if factory is None:
        raise SsrkitError(f"unknown solver {name!r}; available: {', '.join(sorted(SOLVERS))}")
    return factory(**options)


# -- the LLM solver's run (the agent loop with the solver prompt) -----------------------------------

def task_from_weaken_diff(weaken_diff: str) -> str:
    """The solver's task text: the fixed template around the reverse of `test_weaken.diff`."""
    from ..agents import solver_task

    return solver_task(patches.reverse(weaken_diff))


def solver_agent(sandbox: Sandbox, client: "ModelClient | None", task_text: str, out_dir: str | Path | None = None,
                 *, config: "AgentConfig | None" = None, info: dict | None = None,
                 model: dict | None = None) -> "tuple[Agent, Trajectory, str]":
    """The solver's agent, its trajectory and its system prompt: what `run_llm_solver` runs with a model client
    and `ssrkit.env.SolverEpisode` drives with replies a trainer generated (one definition of both).

    With `out_dir`, `trajectory.json` is saved there after every step. `model`: what the trajectory records
    about the policy when there is no client (default: the client's description)."""
    from ..agents import Agent, AgentConfig, Trajectory, solver_system

    config = config or AgentConfig()
    system = solver_system(command_timeout=config.command_timeout, max_turns=config.max_turns)
    out = Path(out_dir) if out_dir is not None else None
    described = model if model is not None else (client.describe() if client is not None else {})
    traj = Trajectory("solver", model=described, limits=config.to_dict(),
                      path=trajectories.path_in(out) if out else None, info=info)
    return Agent(client, sandbox, config), traj, system


def run_llm_solver(sandbox: Sandbox, client: "ModelClient", task_text: str, out_dir: str | Path | None = None, *,
                   config: "AgentConfig | None" = None, info: dict | None = None) -> "Trajectory":
    """Run the solver agent in `sandbox`; return its trajectory.

    `task_text` is the whole task, normally `task_from_weaken_diff(artifact.weaken_diff)`. With `out_dir`,
    `trajectory.json` is saved there after every step. The fix is what the agent leaves in the sandbox, taken
    whatever the exit status by whoever grades it (`ssrkit solve`: `solve.solver_diff`, once).
    """
    agent, traj, system = solver_agent(sandbox, client, task_text, out_dir, config=config, info=info)
    agent.run(traj, system, task_text)
    return traj
