"""The LLM injector (SPEC §4): one agent run in a sandbox → one artifact directory, and the batch of N runs.

One run (`run_llm_injection`): the agent writes the five SSR files into a submission directory in the
sandbox's scratch area — outside the repository, so they can never leak into the diffs the agent computes
with `git diff`. On submit they are read back and written, with `artifact.toml` and the trajectory, via
`create_artifact`; the run itself only records what the model produced.

The batch (`inject_llm`): N runs in parallel sandboxes, each validated. Unlike the procedural injector,
every finished injection is kept, valid or not: the injector's reward is −1 for an invalid artifact, and
training needs those rollouts too. Injection i of a seed always lands in the same directory
(`llm-s<seed>-<i>`), so a re-run skips finished ones; one that was killed mid-way is moved aside
(`….interrupted`, its trajectory kept) and run again. The batch returns an `InjectReport` and writes it to
`out/inject.json`.
"""

from __future__ import annotations

import random
import shutil
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..agents import STRATEGIES, Agent, AgentConfig, ModelClient, Trajectory, injector_prompts
from ..store.artifact import (ALIASES, BUG_DIFF, CORE_FILES, MAX_CORE_BYTES, METADATA, TEST_FILES, TEST_PARSER, TEST_SCRIPT,
                        TRAJECTORY, VALIDATION, WEAKEN_DIFF, Artifact, Metadata, create_artifact)
from ..store.config import Config, load_settings
from ..errors import SsrkitError
from ..executor import ArtifactRef, SourceRef, read_tree, relabel, write_tree
from ..store import trajectory as trajectories
from ..store.fsutil import own_dir
from ..store.trajectory import SUBMITTED
from ..sandbox import SandboxOptions, backend_from_config
from ..sandbox import timeouts
from ..sandbox.base import FileTooLargeError, Sandbox
from ..testrun import TEST_TIMEOUT
from ..store.source import RepoSource, head_commit
from ..executor.units import path_mapping, relabel_bytes, scratch_for
from ..validate import Settings, Validator
from .runner import InjectSettings
from .summary import Injection, InjectReport, StrategyStats

if TYPE_CHECKING:
    from ..executor import Executor, Shard

#: `injector.agent` in the artifacts this injector writes
AGENT = "llm"

DEFAULT_MIXTURE = {"removal": 0.5, "history": 0.5}
SUBMISSION_DIRNAME = "ssrkit_submission"


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
    settings: Settings | None = None,
    seed: int | None = None,
    config: AgentConfig | None = None,
    source: RepoSource | None = None,
    base_commit: str | None = None,
    test_timeout: float = TEST_TIMEOUT,
    exclude_tests: list[str] | None = None,
) -> InjectionResult:
    """Run the injector agent in `sandbox` and write the artifact directory `out_dir`.

    `strategy` None samples one from `mixture` (default 50/50 removal/history) with `seed`; the prompt states
    the thresholds of the `[validate]` `settings` (default: validate's defaults), the ones the artifact will
    be validated against. The trajectory
    is kept at `out_dir/trajectory.json` from the first step on, also when the run fails; `out_dir` becomes
    an artifact (five files + artifact.toml, written last) only when every file was submitted non-empty.
    A submission that lacks files keeps exit_status "submitted" — the model did submit — with an `error`
    naming each missing file. Raises only for an unusable endpoint (ModelError) or a reused `out_dir`.
    """
    run = InjectionRun(sandbox, client, out_dir=out_dir, strategy=strategy, mixture=mixture, settings=settings,
                       seed=seed, config=config, source=source, base_commit=base_commit, test_timeout=test_timeout,
                       exclude_tests=exclude_tests)
    run.agent.run(run.traj, run.system, run.task)
    return run.finish()


class InjectionRun:
    """One injection in two halves around the agent's conversation: the submission directory, prompts and
    trajectory (here), then `finish` (collect the five files, write the artifact). `run_llm_injection` runs the
    conversation with a model client; `ssrkit.env.InjectorEpisode` with replies a trainer generated (`client`
    None, `model`: what the artifact and trajectory record about that policy)."""

    def __init__(self, sandbox: Sandbox, client: ModelClient | None, *, out_dir: str | Path,
                 strategy: str | None = None, mixture: dict[str, float] | None = None,
                 settings: Settings | None = None, seed: int | None = None, config: AgentConfig | None = None,
                 source: RepoSource | None = None, base_commit: str | None = None,
                 test_timeout: float = TEST_TIMEOUT, exclude_tests: list[str] | None = None,
                 model: dict[str, Any] | None = None):
        out_dir = Path(out_dir)
        if (out_dir / METADATA).exists() or any((out_dir / n).exists() for n in CORE_FILES):
            raise SsrkitError(f"{out_dir} already holds an artifact; choose a new directory or remove it")
        thresholds = (settings or Settings()).thresholds()
        config = config or AgentConfig()
        mixture = dict(mixture or DEFAULT_MIXTURE)
        rng = random.Random(seed)
        strategy = strategy or choose_strategy(mixture, rng)
        if strategy not in STRATEGIES:
            raise SsrkitError(f"unknown injection strategy {strategy!r}; known: {', '.join(STRATEGIES)}")

        sub = sandbox.scratch_path(SUBMISSION_DIRNAME)
        prep = sandbox.run(f"rm -rf {shlex.quote(sub)} && mkdir -p {shlex.quote(sub)}", timeout=timeouts.FEW_FILES)
        if not prep.ok:
            raise SsrkitError(f"could not create the submission directory {sub} in the sandbox: {prep.output[:300]}")
        if base_commit is None:
            head = sandbox.run("git rev-parse HEAD", timeout=timeouts.FEW_FILES)
            base_commit = head.output.strip() if head.ok else None

        self.system, self.task = injector_prompts(
            strategy, submission_dir=sub, **thresholds, test_timeout=test_timeout,
            command_timeout=config.command_timeout, max_turns=config.max_turns, exclude_tests=exclude_tests or ())
        self.traj_path = trajectories.path_in(out_dir)
        info = {"strategy": strategy, "strategy_mixture": mixture, "seed": seed, "base_commit": base_commit,
                "thresholds": thresholds, "submission_dir": sub}
        self.model = model if model is not None else client.describe() if client is not None else {}
        self.traj = Trajectory("injector", model=self.model, limits=config.to_dict(), path=self.traj_path, info=info)
        self.sandbox, self.client, self.sub, self.out_dir, self.strategy = sandbox, client, sub, out_dir, strategy
        self.source, self.base_commit, self.seed, self.mixture = source, base_commit, seed, mixture
        rejected: list[list[str]] = []

        def check_submission() -> str | None:
            problems = _problems(_collect(sandbox, sub))
            if not problems or rejected:  # one second chance; then the driver reports what is missing
                return None
            rejected.append(problems)
            return (f"Not submitted: {'; '.join(problems)} in {sub}. Write the missing files there and call "
                    f"submit again.")

        self.agent = Agent(client, sandbox, config, on_submit=check_submission, writable_dirs=(sub,))

    def finish(self) -> InjectionResult:
        """Once the conversation is over: the five files from the submission directory → the artifact."""
        traj, sandbox, sub = self.traj, self.sandbox, self.sub
        result = InjectionResult(out_dir=self.out_dir, strategy=self.strategy, exit_status=traj.exit_status,
                                 trajectory_path=self.traj_path, error=traj.error, seconds=round(traj.elapsed(), 3))
        if traj.exit_status != SUBMITTED:
            result.error = result.error or f"the injector did not submit ({traj.exit_status})"
            return result

        files = _collect(sandbox, sub)
        problems = _problems(files)
        if problems:
            result.missing = [n for n, text in files.items() if not isinstance(text, str) or not text.strip()]
            result.error = f"submission incomplete: {'; '.join(problems)} (in the sandbox's {sub})"
            traj.set_error(result.error)
            return result

        traj.set_submission({**(traj.data["submission"] or {}), "files": list(CORE_FILES)})
        meta = Metadata(
            repo=self.source, base_commit=self.base_commit, strategy=self.strategy, order=1,
            injector={"agent": AGENT, **self._policy(), "seed": self.seed, "strategy_mixture": self.mixture,
                      "trajectory": TRAJECTORY},
        )
        text = {n: t if isinstance(t, str) else "" for n, t in files.items()}
        test_files = [ln.strip() for ln in text[TEST_FILES].splitlines() if ln.strip()]
        art = create_artifact(self.out_dir, bug_diff=text[BUG_DIFF], weaken_diff=text[WEAKEN_DIFF],
                              test_script=text[TEST_SCRIPT], test_files=test_files, test_parser=text[TEST_PARSER],
                              metadata=meta, trajectory=traj.data)
        result.artifact = art.path
        return result

    def _policy(self) -> dict[str, Any]:
        """artifact.toml's model, base_url and sampling: the client's, else what `model` says."""
        c = self.client
        if c is not None:
            return {"model": c.model, "base_url": c.public_url, "sampling": c.sampling.to_dict()}
        return {"model": self.model.get("model"), "base_url": self.model.get("base_url"),
                "sampling": dict(self.model.get("sampling") or {})}


def _collect(sandbox: Sandbox, sub: str) -> dict[str, str | FileTooLargeError | None]:
    """The five files from the submission directory (None when absent; the refusal for one over
    MAX_CORE_BYTES, which is never read); the paper's names accepted too."""
    out: dict[str, str | FileTooLargeError | None] = {}
    for name in CORE_FILES:
        out[name] = None
        for candidate in (name, *ALIASES.get(name, ())):
            try:
                out[name] = sandbox.read_small(f"{sub}/{candidate}", MAX_CORE_BYTES).decode("utf-8", errors="replace")
            except FileTooLargeError as e:
                out[name] = e
                break
            except (FileNotFoundError, IsADirectoryError):
                continue
            if out[name].strip():
                break
    return out


def _problems(files: dict[str, str | FileTooLargeError | None]) -> list[str]:
    out = []
    for n, text in files.items():
        if isinstance(text, FileTooLargeError):
            out.append(f"{n} is {text.strerror}")
        elif text is None or not text.strip():
            out.append(f"{n} is {'missing' if text is None else 'empty'}")
    return out


def injection_summary(result: InjectionResult) -> dict[str, Any]:
    """A JSON-able line for logs and `--json` output."""
    return {"out_dir": str(result.out_dir), "ok": result.ok, "strategy": result.strategy,
            "exit_status": result.exit_status, "error": result.error, "seconds": result.seconds,
            "artifact": str(result.artifact) if result.artifact else None, "missing": result.missing}


# -- the batch -------------------------------------------------------------------------------------

def parse_mixture(text: str | None) -> dict[str, float]:
    """'removal,history' (equal weights) or 'removal=0.7,direct=0.3' → weights; default 50/50 removal/history."""
    if not text:
        return dict(DEFAULT_MIXTURE)
    out: dict[str, float] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, weight = item.partition("=")
        name = name.strip().lower()
        if name not in STRATEGIES:
            raise SsrkitError(f"unknown LLM injection strategy {name!r}; choose from {', '.join(STRATEGIES)}")
        try:
            out[name] = float(weight) if weight else 1.0
        except ValueError:
            raise SsrkitError(f"strategy weight {weight!r} is not a number (e.g. removal=0.7)") from None
        if out[name] < 0:
            raise SsrkitError("strategy weights must be non-negative")
    if not out or sum(out.values()) <= 0:
        raise SsrkitError("the strategy mixture has no positive weight")
    return out


def _finished(d: Path) -> bool:
    """A directory whose injection ended (artifact written, or trajectory closed without one)."""
    if (d / METADATA).is_file():
        return True
    return trajectories.ended(trajectories.path_in(d))  # a file that is not a trajectory: redone


def _currently_valid(art: Artifact) -> bool | None:
    """The artifact's validity by a validation of its present files; None when there is none."""
    try:
        return bool(art.current_validation().get("valid"))
    except SsrkitError:
        return None


def _set_aside(d: Path) -> None:
    k = 1
    while d.with_name(f"{d.name}.interrupted-{k}").exists():
        k += 1
    d.rename(d.with_name(f"{d.name}.interrupted-{k}"))


def inject_llm(
    source: RepoSource,
    out: Path,
    *,
    client: ModelClient,
    n: int,
    jobs: int = 1,
    seed: int = 0,
    mixture: dict[str, float] | None = None,
    config: Config,
    backend: str | None = None,
    options: SandboxOptions | None = None,
    validate: bool = True,
    on_done: Callable[[Injection], None] | None = None,
    executor: "Executor | None" = None,
    shard: "Shard | None" = None,
) -> InjectReport:
    """Run `n` LLM injections into `out/`; returns the report (one `Injection` each, per-strategy stats),
    also written to `out/inject.json`.

    Each injection (and its validation) is a unit of `executor` (default: the local pool of `jobs`); with
    `shard` K/N only the injections i with i mod N = K−1 run, so N shards together make the same n."""
    started = time.monotonic()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mixture = mixture or dict(DEFAULT_MIXTURE)
    settings = Settings.from_config(config)
    agent_cfg = AgentConfig.from_config(config)
    backend = backend_from_config(config, backend)
    validator = Validator(settings, backend=backend, options=options)
    base_commit = head_commit(source.path) if source.kind == "local" else None
    excluded = load_settings(InjectSettings, config).exclude_tests  # the repository's profile
    exclude_tests = shlex.split(excluded) if isinstance(excluded, str) else list(excluded)
    stats: dict[str, StrategyStats] = {}
    from ..executor import LocalExecutor, run_units
    from ..sandbox.env import environment_key
    from ..validate import ValidatorSpec

    ex = executor or LocalExecutor(max(1, min(jobs, n)))
    opts = options or SandboxOptions()
    indices = [i for i in range(n) if shard is None or shard.owns_index(i)]
    env = LLMInjection(source=ex.source_ref(source), client=client, mixture=mixture, settings=settings,
                       agent=agent_cfg, base_commit=base_commit, timeout=settings.timeout,
                       exclude_tests=exclude_tests, backend=backend, options=options,
                       validator=(ValidatorSpec(settings, backend, opts, environment_key(opts)) if ex.portable
                                  else validator) if validate else None)
    args = []
    for i in indices:
        d = own_dir(out / f"llm-s{seed}-{i:03d}", "the injection directory")
        rng = random.Random(f"{seed}-{i}")
        strategy = choose_strategy(mixture, rng)
        reused = _finished(d)
        if not reused and d.exists():
            _set_aside(d)
        ref = ex.artifact_ref(d) if reused else ArtifactRef(str(d), {} if ex.portable else None)
        args.append((env, ref, strategy, rng.randrange(2**31), reused))

    def done(k: int, out_: tuple[str, str | None, dict[str, bytes] | None]) -> None:
        status, error, files = out_
        d = Path(args[k][1].origin)
        if files is not None:
            write_tree(d, files, last=(METADATA, VALIDATION))
        strategy, reused = args[k][2], args[k][4]
        valid = None
        art_id = None
        if (d / METADATA).is_file():
            art = Artifact(d)
            strategy = art.metadata.strategy
            art_id = art.id
            if validate:
                valid = _currently_valid(art)
        record = Injection(art_id, d, strategy, status, error=error, valid=valid, reused=reused)
        st = stats.setdefault(strategy, StrategyStats())
        st.tried += 1
        st.kept += art_id is not None
        st.valid += bool(valid)
        st.count("valid" if valid else ("invalid" if art_id else status))
        if on_done:
            on_done(record)
        records[k] = record

    records: dict[int, Injection] = {}
    try:
        run_units(ex, llm_injection_unit, args, done)
    finally:
        if executor is None:
            ex.close()
    report = InjectReport(AGENT, n, [records[k] for k in range(len(args))], dict(sorted(stats.items())),
                          seconds=time.monotonic() - started)
    report.write(out, shard)
    return report


# -- one LLM injection (and its validation) --------------------------------------------------------

@dataclass
class LLMInjection:
    """What every injection of one `inject --agent llm` run shares."""

    source: SourceRef
    client: Any
    mixture: dict[str, float]
    settings: Settings  # `[validate]`: the thresholds the prompt states
    agent: Any
    base_commit: str | None
    timeout: float
    exclude_tests: list[str]
    backend: str
    options: SandboxOptions | None
    validator: Any  # a Validator, a ValidatorSpec, or None (no validation)


def llm_injection_unit(env: LLMInjection, ref: ArtifactRef, strategy: str, seed: int,
                       reused: bool) -> tuple[str, str | None, dict[str, bytes] | None]:
    """Run one injection into `ref`'s directory (unless `reused`: it ended earlier) and validate what it
    made: (exit status, error, the directory's files when the driver must write them)."""
    from ..sandbox import open_sandbox
    from ..validate import cached_validator, write_report

    with scratch_for(ref) as scratch:
        d = ref.materialize(scratch) if scratch is not None else Path(ref.origin)
        source = env.source.materialize()
        if not reused:
            if scratch is not None:
                shutil.rmtree(d)  # run_llm_injection makes the directory itself
            with open_sandbox(source, env.backend, env.options) as sb:
                result = run_llm_injection(sb, env.client, out_dir=d, strategy=strategy, mixture=env.mixture,
                                           settings=env.settings, seed=seed, config=env.agent,
                                           source=env.source.source, base_commit=env.base_commit,
                                           test_timeout=env.timeout, exclude_tests=env.exclude_tests)
            status, error = result.exit_status, result.error
        else:
            traj = trajectories.read_or_none(trajectories.path_in(d)) or {}
            status, error = traj.get("exit_status", SUBMITTED), traj.get("error")
        if env.validator is not None and (d / METADATA).is_file():
            art = Artifact(d)
            if _currently_valid(art) is None:  # not validated, or its files changed since: validate them
                report = relabel(cached_validator(env.validator).validate(art, source), path_mapping(d, ref, source, env.source))
                report.source = env.source.source.to_dict()
                report.environment = env.validator.environment  # the driver's, as validate_all records it
                write_report(art, report)
        files = read_tree(d) if scratch is not None else None
    mapping = path_mapping(d, ref, source, env.source)
    return relabel(status, mapping), relabel(error, mapping), relabel_bytes(files, mapping) if files else files
