"""The LLM injector driver (SPEC §4): one agent run in a sandbox → one artifact directory.

The agent writes the five SSR files into a submission directory in the sandbox's scratch area — outside the
repository, so they can never leak into the diffs the agent computes with `git diff`. On submit they are
read back and written, with `artifact.toml` and the trajectory, via `create_artifact`. Validation is the
caller's job (`ssrkit validate`); this module only records what the model produced.
"""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..artifact import (ALIASES, BUG_DIFF, CORE_FILES, METADATA, TEST_FILES, TEST_PARSER, TEST_SCRIPT,
                        TRAJECTORY, WEAKEN_DIFF, Metadata, create_artifact)
from ..errors import SsrkitError
from ..sandbox.base import Sandbox
from ..source import RepoSource
from .client import ModelClient
from .loop import Agent, AgentConfig
from .prompts import STRATEGIES, injector_prompts
from .trajectory import Trajectory

DEFAULT_MIXTURE = {"removal": 0.5, "history": 0.5}
SUBMISSION_DIRNAME = "ssrkit_submission"


@dataclass
class Thresholds:
    """Filled into the prompt; the same numbers `validate` enforces."""

    min_passing_tests: int = 5
    min_failing_tests: int = 1
    min_changed_files: int = 1


@dataclass
class InjectionResult:
    """How one injection ended. `artifact` is set only when all five files were collected."""

    out_dir: Path
    strategy: str
    exit_status: str
    trajectory_path: Path
    artifact: Path | None = None
    error: str | None = None
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.artifact is not None


def choose_strategy(mixture: dict[str, float] | None, rng: random.Random) -> str:
    """Sample a strategy from a mixture of non-negative weights (they need not sum to 1)."""
    mixture = dict(mixture or DEFAULT_MIXTURE)
    bad = [s for s in mixture if s not in STRATEGIES]
    if bad:
        raise SsrkitError(f"unknown injection strateg{'y' if len(bad) == 1 else 'ies'} {', '.join(bad)}; "
                          f"known: {', '.join(STRATEGIES)}")
    if any(w < 0 for w in mixture.values()) or sum(mixture.values()) <= 0:
        raise SsrkitError(f"strategy mixture needs non-negative weights with a positive sum, got {mixture}")
    names = sorted(mixture)
    return rng.choices(names, weights=[mixture[n] for n in names], k=1)[0]


def run_llm_injection(
    sandbox: Sandbox,
    client: ModelClient,
    *,
    out_dir: str | Path,
    strategy: str | None = None,
    mixture: dict[str, float] | None = None,
    thresholds: Thresholds | None = None,
    seed: int | None = None,
    config: AgentConfig | None = None,
    source: RepoSource | None = None,
    base_commit: str | None = None,
    test_timeout: float = 90.0,
    exclude_tests: list[str] | None = None,
) -> InjectionResult:
    """Run the injector agent in `sandbox` and write the artifact directory `out_dir`.

    `strategy` None samples one from `mixture` (default 50/50 removal/history) with `seed`. The trajectory
    is kept at `out_dir/trajectory.json` from the first step on, also when the run fails; `out_dir` becomes
    an artifact (five files + artifact.toml, written last) only when every file was submitted non-empty.
    A submission that lacks files keeps exit_status "submitted" — the model did submit — with an `error`
    naming each missing file. Raises only for an unusable endpoint (ModelError) or a reused `out_dir`.
    """
    out_dir = Path(out_dir)
    if (out_dir / METADATA).exists() or any((out_dir / n).exists() for n in CORE_FILES):
        raise SsrkitError(f"{out_dir} already holds an artifact; choose a new directory or remove it")
    thresholds = thresholds or Thresholds()
    config = config or AgentConfig()
    mixture = dict(mixture or DEFAULT_MIXTURE)
    rng = random.Random(seed)
    strategy = strategy or choose_strategy(mixture, rng)
    if strategy not in STRATEGIES:
        raise SsrkitError(f"unknown injection strategy {strategy!r}; known: {', '.join(STRATEGIES)}")

    sub = sandbox.scratch_path(SUBMISSION_DIRNAME)
    prep = sandbox.run(f"rm -rf {shlex.quote(sub)} && mkdir -p {shlex.quote(sub)}", timeout=60)
    if not prep.ok:
        raise SsrkitError(f"could not create the submission directory {sub} in the sandbox: {prep.output[:300]}")
    if base_commit is None:
        head = sandbox.run("git rev-parse HEAD", timeout=60)
        base_commit = head.output.strip() if head.ok else None

    system, task = injector_prompts(
        strategy, submission_dir=sub, min_passing_tests=thresholds.min_passing_tests,
        min_failing_tests=thresholds.min_failing_tests, min_changed_files=thresholds.min_changed_files,
        test_timeout=test_timeout, command_timeout=config.command_timeout, max_turns=config.max_turns,
        exclude_tests=exclude_tests or ())
    traj_path = out_dir / TRAJECTORY
    info = {"strategy": strategy, "strategy_mixture": mixture, "seed": seed, "base_commit": base_commit,
            "thresholds": vars(thresholds).copy(), "submission_dir": sub}
    traj = Trajectory("injector", model=client.describe(), limits=config.to_dict(), path=traj_path, info=info)

    rejected = []

    def check_submission() -> str | None:
        problems = _problems(_collect(sandbox, sub))
        if not problems or rejected:  # one second chance; then the driver reports what is missing
            return None
        rejected.append(problems)
        return (f"Not submitted: {'; '.join(problems)} in {sub}. Write the missing files there and call "
                f"submit again.")

    agent = Agent(client, sandbox, config, on_submit=check_submission, writable_dirs=(sub,))
    agent.run(traj, system, task)
    result = InjectionResult(out_dir=out_dir, strategy=strategy, exit_status=traj.exit_status,
                             trajectory_path=traj_path, error=traj.error, seconds=round(traj.elapsed(), 3))
    if traj.exit_status != "submitted":
        result.error = result.error or f"the injector did not submit ({traj.exit_status})"
        return result

    files = _collect(sandbox, sub)
    problems = _problems(files)
    if problems:
        result.missing = [n for n, text in files.items() if text is None or not text.strip()]
        result.error = f"submission incomplete: {'; '.join(problems)} (in the sandbox's {sub})"
        traj.set_error(result.error)
        return result

    traj.set_submission({**(traj.data["submission"] or {}), "files": list(CORE_FILES)})
    meta = Metadata(
        repo=source, base_commit=base_commit, strategy=strategy, order=1,
        injector={"agent": "llm", "model": client.model, "base_url": client.public_url, "seed": seed,
                  "strategy_mixture": mixture, "trajectory": TRAJECTORY,
                  "sampling": client.sampling.to_dict()},
    )
    text = {n: t or "" for n, t in files.items()}
    test_files = [ln.strip() for ln in text[TEST_FILES].splitlines() if ln.strip()]
    art = create_artifact(out_dir, bug_diff=text[BUG_DIFF], weaken_diff=text[WEAKEN_DIFF],
                          test_script=text[TEST_SCRIPT], test_files=test_files, test_parser=text[TEST_PARSER],
                          metadata=meta, trajectory=traj.data)
    result.artifact = art.path
    return result


def _collect(sandbox: Sandbox, sub: str) -> dict[str, str | None]:
    """The five files from the submission directory (None when absent); the paper's names accepted too."""
    out: dict[str, str | None] = {}
    for name in CORE_FILES:
        out[name] = None
        for candidate in (name, *ALIASES.get(name, ())):
            try:
                out[name] = sandbox.read_file(f"{sub}/{candidate}").decode("utf-8", errors="replace")
            except (FileNotFoundError, IsADirectoryError):
                continue
            if out[name].strip():
                break
    return out


def _problems(files: dict[str, str | None]) -> list[str]:
    return [f"{n} is {'missing' if text is None else 'empty'}" for n, text in files.items()
            if text is None or not text.strip()]


def injection_summary(result: InjectionResult) -> dict[str, Any]:
    """A JSON-able line for logs and `--json` output."""
    return {"out_dir": str(result.out_dir), "ok": result.ok, "strategy": result.strategy,
            "exit_status": result.exit_status, "error": result.error, "seconds": result.seconds,
            "artifact": str(result.artifact) if result.artifact else None, "missing": result.missing}
