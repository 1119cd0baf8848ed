"""The LLM solver driver (SPEC §6): the same agent loop with the solver prompt; the fix is the sandbox diff.

The caller prepares the sandbox (original + bug + weakened tests, fresh git history) and grades the fix;
this module only runs the agent and reads back what it changed.
"""

from __future__ import annotations

from pathlib import Path

from ..artifact import TRAJECTORY
from ..fsutil import atomic_write_text
from ..patch import reverse
from ..sandbox.base import Sandbox
from .client import ModelClient
from .loop import Agent, AgentConfig
from .prompts import solver_system, solver_task
from .trajectory import Trajectory

FIX_DIFF = "fix.diff"


def task_from_weaken_diff(weaken_diff: str) -> str:
    """The solver's task text: the fixed template around the reverse of `test_weaken.diff`."""
    return solver_task(reverse(weaken_diff))


def run_llm_solver(
    sandbox: Sandbox,
    client: ModelClient,
    task_text: str,
    out_dir: str | Path | None = None,
    *,
    config: AgentConfig | None = None,
    info: dict | None = None,
) -> tuple[Trajectory, str]:
    """Run the solver agent; return its trajectory and the fix (`sandbox.diff()` at the end, '' if none).

    `task_text` is the whole task, normally `task_from_weaken_diff(artifact.weaken_diff)`. With `out_dir`,
    `trajectory.json` is saved there after every step and `fix.diff` at the end. The fix is taken whatever
    the exit status: grading decides.
    """
    config = config or AgentConfig()
    system = solver_system(command_timeout=config.command_timeout, max_turns=config.max_turns)
    out = Path(out_dir) if out_dir is not None else None
    traj = Trajectory("solver", model=client.describe(), limits=config.to_dict(),
                      path=out / TRAJECTORY if out else None, info=info)
    Agent(client, sandbox, config).run(traj, system, task_text)
    fix = sandbox.diff()
    traj.set_submission({**(traj.data["submission"] or {}), "fix_diff_bytes": len(fix.encode())})
    if out is not None:
        atomic_write_text(out / FIX_DIFF, fix)
    return traj, fix
