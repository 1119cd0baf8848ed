"""The injector episode: one bug injection on a repository, as `ssrkit inject --agent llm` makes it.

reset: a sandbox on the repository, the submission directory, the injector's prompts for the strategy
(`InjectionRun`, the same code `run_llm_injection` runs). step: the agent loop's `act`, with the submission
check on submit. done: the five files become the artifact directory `out_dir`, validated at once.

The injector's reward depends on other episodes: −1 when the artifact is invalid (final at once), else
1 − (1+α)·s from the solve rate s of the group of solver attempts made on it (SPEC §7). So a valid injection
ends with `reward=None` (pending) and `info["artifact"]`; `injector_group_rewards` settles a group once its
artifacts' solver attempts are known (given, or read from their attempts/ on disk, e.g. solver episodes run
with `record=True`, or `ssrkit solve`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..agents import AgentConfig
from ..errors import SsrkitError
from ..inject.llm import InjectionRun
from ..sandbox import SandboxOptions, open_sandbox
from ..store.artifact import Artifact
from ..store.attempts import scored_attempts
from ..store.source import RepoSource
from ..testrun import TEST_TIMEOUT
from ..validate import Settings, Validator, write_report
from ..verdict.rewards import DEFAULT_ALPHA, reward_record
from .episode import Episode
from .solver import EXTERNAL_POLICY


class InjectorEpisode(Episode):
    """One injection into `out_dir` (a new directory) on `source`. The reward: −1 now, or pending (None).

    The prompt states the thresholds of `settings` (`[validate]`), else those of `validator` (else validate's
    defaults), and a default validator checks the artifact against the same settings: the prompt never
    promises numbers the validation does not enforce."""

    role = "injector"

    def __init__(self, source: RepoSource | str | Path, out_dir: str | Path, *, strategy: str | None = None,
                 seed: int | None = None, settings: Settings | None = None, config: AgentConfig | None = None,
                 backend: str = "auto", options: SandboxOptions | None = None, validator: Validator | None = None,
                 test_timeout: float = TEST_TIMEOUT, exclude_tests: list[str] | None = None,
                 model: dict[str, Any] | None = None):
        super().__init__()
        self.source = source if isinstance(source, RepoSource) else RepoSource.local(Path(source))
        self.out_dir = Path(out_dir)
        self.backend, self.options = backend, options or SandboxOptions()
        settings = settings or (validator.settings if validator is not None else Settings())
        self.validator = validator or Validator(settings, backend=backend, options=self.options)
        self.kw = dict(strategy=strategy, seed=seed, settings=settings, config=config or AgentConfig(),
                       test_timeout=test_timeout, exclude_tests=exclude_tests, model=dict(model or EXTERNAL_POLICY))
        self._run: InjectionRun | None = None

    @property
    def submission_dir(self) -> str | None:
        """Where the model must write the five files (in the sandbox; also named in the task message)."""
        return self._run.sub if self._run is not None else None

    def _open(self) -> bool:
        self._sandbox = open_sandbox(self.source, self.backend, self.options)
        self._run = InjectionRun(self._sandbox, None, out_dir=self.out_dir, source=self.source, **self.kw)
        self._agent = self._run.agent
        return self._agent.start(self._run.traj, self._run.system, self._run.task)

    def _finish(self) -> None:
        result = self._run.finish()
        self._close_sandbox()
        self.info = {"exit_status": result.exit_status, "strategy": result.strategy, "out_dir": str(self.out_dir),
                     "artifact": None, "valid": False}
        if result.error:
            self.info["error"] = result.error
        if result.artifact is None:
            self.reward = reward_record(valid=False, passed=[])["injector_reward"]
            return
        art = Artifact(result.artifact)
        report = self.validator.validate(art, self.source)
        write_report(art, report)
        self.info.update(artifact=str(art.path), valid=bool(report.valid), id=art.id)
        self.reward = None if report.valid else reward_record(valid=False, passed=[])["injector_reward"]


def injector_group_rewards(infos: list[dict[str, Any]], attempts: dict[str, list[bool]] | None = None, *,
                           alpha: float = DEFAULT_ALPHA) -> list[float]:
    """The group-level reward hook: each injector episode's reward from its final `info` and the solver
    attempts on its artifact. `attempts`: artifact path → the verdicts (passed?) of its solver attempts;
    an artifact not in it is read from disk (its finished attempts/NNN). A valid artifact with no attempt yet
    is an error: its reward cannot be known until it has been solved."""
    out = []
    for info in infos:
        if not info.get("valid"):
            out.append(reward_record(valid=False, passed=[])["injector_reward"])
            continue
        path = str(info["artifact"])
        passed = (attempts or {}).get(path)
        if passed is None:
            passed = [bool(a.eval["passed"]) for a in scored_attempts(Artifact(Path(path))) if a.finished]
        if not passed:
            raise SsrkitError(f"{path}: no finished solver attempt yet; solve it first (solver episodes with "
                              f"record=True, or ssrkit solve)")
        out.append(reward_record(valid=True, passed=passed, alpha=alpha)["injector_reward"])
    return out
