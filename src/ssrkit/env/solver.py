"""The solver episode: one attempt at one valid artifact, exactly as `ssrkit solve --solver llm` makes it.

reset: a sandbox on the artifact's repository with the artifact hidden, prepared by `prepare_solver_sandbox`
(original + bug + weakened tests, one fresh commit), the solver's system prompt and task (the reversed
`test_weaken.diff`). step: the agent loop's `act` (tool call, observation with the budget line, format errors,
limits). done: the sandbox's diff is the fix, graded by `Engine.grade_fix` in two fresh sandboxes (the
hardened grade); the reward is `solver_reward(passed)` (+1 / −1). With `record=True` the attempt is also
written to the artifact's `attempts/NNN/` like any other, so `ssrkit reward` counts env-driven attempts.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..agents import AgentConfig
from ..errors import SsrkitError
from ..solve.grade import load_expectations
from ..solve import Engine, prepare_solver_sandbox, solver_diff, task_diff
from ..solve.solvers import solver_agent
from ..store.artifact import Artifact
from ..store.attempts import begin_attempt, claim_new_attempt, eval_record, write_fix, write_graded
from ..store.source import RepoSource
from ..verdict.rewards import solver_reward
from .episode import Episode

#: what the trajectory records about a policy the environment never sees
EXTERNAL_POLICY = {"model": "external"}


def artifact_source(artifact: Artifact) -> RepoSource:
    """The repository recorded in artifact.toml (a clear error when there is none, or it is gone)."""
    meta = artifact.metadata
    if meta.repo is None:
        raise SsrkitError(f"{artifact.path}: no repository recorded (no artifact.toml [repo]); give its source")
    if meta.repo.kind == "local" and not Path(meta.repo.path).is_dir():
        raise SsrkitError(f"{artifact.path}: its repository {meta.repo.path} does not exist")
    return meta.repo


class SolverEpisode(Episode):
    """One solver attempt. `artifact` must be valid and validated (else a clear SsrkitError here, at once)."""

    role = "solver"

    def __init__(self, artifact: Artifact | str | Path, source: RepoSource | None = None, *,
                 engine: Engine | None = None, config: AgentConfig | None = None, record: bool = False,
                 model: dict[str, Any] | None = None):
        super().__init__()
        self.artifact = artifact if isinstance(artifact, Artifact) else Artifact(Path(artifact))
        if not self.artifact.path.is_dir():
            raise SsrkitError(f"{self.artifact.path}: no such artifact directory")
        self.expect = load_expectations(self.artifact)  # "invalid … validate it first" before any sandbox
        self.source = source or artifact_source(self.artifact)
        self.engine = engine or Engine()
        self.config = config or AgentConfig()
        self.record = record
        self.model = dict(model or EXTERNAL_POLICY)
        self.attempt: str | None = None
        self._started = 0.0

    def _open(self) -> bool:
        self._started = time.monotonic()
        out_dir = None
        if self.record:
            self.attempt = claim_new_attempt(self.artifact)
            out_dir = begin_attempt(self.artifact, self.attempt)
        self._sandbox = self.engine.open(self.source, hide=self.engine.hidden_paths([self.artifact]))
        prepare_solver_sandbox(self._sandbox, self.artifact)
        task = _solver_task(self.artifact)
        self._agent, traj, system = solver_agent(self._sandbox, None, task, out_dir, config=self.config,
                                                 info={"artifact": self.artifact.id, "env": True},
                                                 model=self.model)
        return self._agent.start(traj, system, task)

    def _finish(self) -> None:
        traj = self._agent.traj
        fix = solver_diff(self._sandbox)
        self._close_sandbox()  # graded in two fresh sandboxes; this one is no longer needed
        traj.set_submission({**(traj.data["submission"] or {}), "fix_diff_bytes": len(fix.encode())})
        grade = self.engine.grade_fix(self.artifact, self.source, fix, self.expect)
        self.reward = solver_reward(grade.passed)
        self.info = {"exit_status": traj.exit_status, "turns": len(traj.turns), "passed": grade.passed,
                     "reason": grade.reason, "fix": fix, "artifact": self.artifact.id}
        if traj.error:
            self.info["error"] = traj.error
        if self.record and self.attempt is not None:
            solver_info = {"name": "env", "model": self.model.get("model"), "exit_status": traj.exit_status,
                           "turns": len(traj.turns), "seconds": round(time.monotonic() - self._started, 3)}
            write_fix(self.artifact, self.attempt, fix)
            record = eval_record(grade.to_dict(), solver="env", attempt=self.attempt, artifact=self.artifact,
                                 solver_info=solver_info)
            write_graded(self.artifact, self.attempt, grade.log, grade.canary_log, record)
            self.info["attempt"] = self.attempt


def _solver_task(artifact: Artifact) -> str:
    from ..agents import solver_task

    return solver_task(task_diff(artifact))
