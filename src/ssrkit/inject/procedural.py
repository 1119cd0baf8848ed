"""The procedural injector: no model, seeded, reproducible (SPEC §4). This module schedules; the candidates
come from `candidates` (one seeded stream per strategy) and each is evaluated by `evaluate`.

Pipeline for one repository:

1. Open one sandbox per worker; map the suite's per-test coverage once (cached per repository state).
2. Candidate streams, one per strategy, each driven by its own seeded RNG (`candidates.stream`).
3. Per candidate, in a worker's sandbox: pre-screen, find the failing tests, weaken, write and validate
   (`evaluate.Evaluator`). Only valid artifacts are kept.
4. Each strategy keeps the first valid artifacts of its stream, in stream order, up to its share of
   `n`, whatever order the workers finish in: the same seed gives the same artifacts (ids are content
   hashes; `created` is the only field that differs). A strategy that runs dry passes its share on.
5. The kept artifacts move from the staging directory to `out/<id>/`; `out/inject.json` records the run
   (`summary.InjectReport`).

Core module: no rendering; progress is reported through `on_event`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..store.artifact import BUG_DIFF, MAX_CORE_BYTES, METADATA, VALIDATION, Artifact, Metadata, check_name
from ..store.config import Config, load_config, load_settings
from ..errors import SsrkitError
from ..executor import Executor, LocalExecutor, Shard, write_tree
from ..store.fsutil import atomic_write_json, own_dir
from ..sandbox import Sandbox, SandboxOptions, backend_from_config, environment_key, open_sandbox
from ..sandbox import timeouts
from ..store.runs import INJECT_CONFIG
from ..store.source import RepoSource
from ..validate import Settings
from .candidates import (AGENT, COMBINE, HISTORY, REUSED, STRATEGIES, Candidate, Event, Outcome, RepoView, listing,
                         parse_strategies, plural, tail)
from .candidates import stream as candidate_stream  # (Session.stream is its seeded front)
from .evaluate import Evaluator, Existing
from .history import Commit, list_commits
from .runner import InjectSettings, Profile, load_profile
from .summary import InjectedArtifact, InjectReport, StrategyStats
from ..mutation.coverage import TestMap, build_testmap, per_test_limit, repo_fingerprint

__all__ = ["STRATEGIES", "Candidate", "Event", "InjectReport", "InjectedArtifact", "Outcome", "Session",
           "StrategyStats", "foreign_imports", "inject", "parse_strategies"]

STAGING = ".staging"  # in the output directory: artifacts being made and validated (hidden: never an artifact)


def staging_for(shard: Shard | None) -> str:
    """The staging directory's name in the output directory: one per shard (shards may share `out`)."""
    return STAGING if shard is None else f"{STAGING}-{shard.k}-of-{shard.n}"


MIN_SCREEN_TIMEOUT = 15.0  # seconds
COVERAGE_TIMEOUT = 600.0  # seconds for the whole suite under coverage (default of [inject] coverage_timeout)
SCREEN_TIMEOUT_FACTOR = 3.0  # × the whole suite's duration under coverage

#: the setting that most often changes a run whose candidates were all discarded for this reason
_HINTS = {
    "no_tests": "[validate] min_passing_tests in ssrkit.toml (fewer passing tests cover each candidate)",
    "harmless": "--max-tries (more candidates per strategy), or more tests in [inject] args",
    "import_error": "[inject] args or test_command in ssrkit.toml (the covering tests do not even import "
                    "with the bug: check how they are run)",
    "timeout": "[inject] screen_timeout in ssrkit.toml (seconds per pre-screen and bug run)",
    "total_break": "--max-tries (more candidates), or [validate] total_break = \"warning\"",
    "unweakenable": "[inject] exclude_tests in ssrkit.toml (the failing tests cannot be located or edited)",
    "invalid": "[validate] settings in ssrkit.toml (see the first failing check above)",
    "duplicate": "--seed (another stream of candidates) or a fresh --out",
    "unchanged": "--max-tries (more candidates per strategy)",
    "error": "[inject] runner / python / test_command in ssrkit.toml",
}


def foreign_imports(sb: Sandbox, python: str) -> dict[str, str]:
    """Top-level packages of the repository that `python` imports from outside the workspace (name -> path)."""
    from importlib import resources

    roots = list(getattr(sb, "import_roots", None) or [sb.root])
    script = sb.scratch_path("ssrkit_imports.py")
    sb.write_file(script, resources.files("ssrkit.sandbox").joinpath("_imports.py").read_bytes())
    res = sb.run(" ".join(shlex.quote(a) for a in (python, script, *roots)), timeout=timeouts.FEW_FILES)
    try:
        found = json.loads(res.output.strip().splitlines()[-1]) if res.ok and res.output.strip() else {}
    except (ValueError, IndexError):
        return {}
    root = sb.root.rstrip("/") + "/"
    real = os.path.realpath(sb.root).rstrip("/") + "/"
    return {n: w for n, w in found.items() if isinstance(w, str) and not w.startswith((root, real))}


# -- scheduling ----------------------------------------------------------------------------------------

@dataclass
class _Stream:
    strategy: str
    quota: int
    it: Iterator[Candidate] | None
    cap: int
    submitted: int = 0
    inflight: int = 0
    exhausted: bool = False
    results: dict[int, Outcome] = field(default_factory=dict)
    kept: list[Outcome] = field(default_factory=list)
    shard: Shard | None = None  # evaluate only the candidates of this shard (by stream index)

    def valid_count(self) -> int:
        return sum(1 for o in self.results.values() if o.valid)

    def needy(self) -> bool:
        return (not self.exhausted and self.it is not None and self.submitted < self.cap
                and self.valid_count() + self.inflight < self.quota)

    def next(self) -> Candidate | None:
        try:
            cand = next(self.it)  # type: ignore[arg-type]
            while self.shard is not None and not self.shard.owns_index(cand.index):
                cand = next(self.it)  # type: ignore[arg-type]
        except StopIteration:
            self.exhausted = True
            return None
        self.submitted += 1
        return cand

    def dry(self) -> bool:
        return self.exhausted or self.it is None or self.submitted >= self.cap


def _run_streams(session: "Session", streams: list[_Stream], pool: Executor) -> None:
    """Evaluate candidates, `pool.slots` at a time, until every stream has its quota of valid ones or runs dry."""
    inflight: dict[Future, _Stream] = {}
    rr = 0
    while True:
        while len(inflight) < pool.slots:
            needy = [s for s in streams if s.needy()]
            if not needy:
                break
            s = needy[rr % len(needy)]
            rr += 1
            cand = s.next()
            if cand is None:
                continue
            s.inflight += 1
            inflight[session.submit(pool, cand)] = s
        if not inflight:
            return
        done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
        for fut in sorted(done, key=lambda f: (inflight[f].strategy,)):
            s = inflight.pop(fut)
            s.inflight -= 1
            outcome = session.receive(pool, fut.result())
            s.results[outcome.candidate.index] = outcome
            if outcome.message:
                session.last_messages.setdefault(outcome.status, outcome.message)
            session.emit(Event("candidate", outcome.message, outcome))


def _quotas(n: int, strategies: tuple[str, ...]) -> dict[str, int]:
    base, extra = divmod(n, len(strategies))
    return {s: base + (1 if i < extra else 0) for i, s in enumerate(strategies)}


def _read_existing(d: Path, staged: bool = False) -> tuple[str, Existing] | None:
    """(the hash of its bug diff, the artifact) of directory `d`; None when it holds no bug diff, is a symlink,
    or (`staged`) is not exactly what this injector leaves in staging: a symlink inside, or an id other than its
    content's. Its validation counts only when it was made from its present files (else None: not valid)."""
    bug = d / BUG_DIFF
    if d.is_symlink() or not d.is_dir() or bug.is_symlink() or not bug.is_file() or \
            bug.stat().st_size > MAX_CORE_BYTES:
        return None
    if staged and _holds_symlink(d):
        return None
    art = Artifact(d)
    try:
        meta = art.metadata
    except (OSError, SsrkitError):
        meta = Metadata()
    try:
        validation = art.current_validation()
    except SsrkitError:
        validation = None
    try:
        art_id = art.id
        if staged and art_id != art.content_id():
            return None
    except (OSError, SsrkitError):
        if staged:
            return None
        art_id = d.name
    return hashlib.sha256(bug.read_bytes()).hexdigest(), Existing(d, meta, validation, staged, art_id)


def _holds_symlink(d: Path) -> bool:
    for root, dirs, files in os.walk(d):
        if any(os.path.islink(os.path.join(root, n)) for n in (*dirs, *files)):
            return True
    return False


def _scan_existing(out: Path, staging: Path, seed: int) -> dict[str, Existing]:
    """Artifacts already in the output directory, by the hash of their bug diff; then the valid artifacts
    an interrupted run of this seed (and shard) left in `staging` (anything else there is removed)."""
    found: dict[str, Existing] = {}
    if not out.is_dir():
        return found
    for d in sorted(out.iterdir()):
        if d.name.startswith("."):
            continue
        item = _read_existing(d)
        if item is not None and item[0] not in found:
            found[item[0]] = item[1]
    for d in sorted(staging.iterdir()) if staging.is_dir() else ():
        item = _read_existing(d, staged=True) if d.is_dir() else None
        if item is None or not _valid(item[1]) or item[1].metadata.injector.get("seed") != seed or \
                item[1].metadata.injector.get("agent") != AGENT:
            _remove(d)
        elif item[0] not in found:
            found[item[0]] = item[1]
    return found


def _valid(e: Existing) -> bool:
    return (e.validation or {}).get("valid") is True


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _keep_valid(staging: Path) -> int:
    """Remove from staging everything but its valid artifacts; how many are left."""
    kept = 0
    for d in sorted(staging.iterdir()) if staging.is_dir() else ():
        item = _read_existing(d, staged=True) if d.is_dir() else None
        if item is not None and _valid(item[1]):
            kept += 1
        else:
            _remove(d)
    if not kept:
        shutil.rmtree(staging, ignore_errors=True)
    return kept


class Session:
    """One repository prepared for injection: runner profile, per-test coverage map, worker sandboxes.

    `inject()` drives it; tests and benchmarks may evaluate hand-made candidates with `evaluate`.
    Use as a context manager (closes every sandbox and drops the staging directory).
    """

    def __init__(self, repo: RepoSource | str | Path, out: str | Path, *, seed: int = 0,
                 config: Config | None = None, settings: Settings | None = None, backend: str | None = None,
                 options: SandboxOptions | None = None, cache: bool = True,
                 on_event: Callable[[Event], None] | None = None,
                 sandbox_factory: Callable[[RepoSource], Sandbox] | None = None, shard: Shard | None = None):
        self.source = repo if isinstance(repo, RepoSource) else RepoSource.local(repo)
        if config is None:
            config = load_config(None, Path(self.source.path) if self.source.kind == "local" else None)
        self.config = config
        self.settings = settings or Settings.from_config(config)
        self.inject = load_settings(InjectSettings, config)
        self.test_patterns = list(self.settings.test_patterns)  # [validate] test_patterns, read by Settings
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        #: evaluate only the candidates of this shard K/N (stream index mod N = K−1): N shards evaluate
        #: disjoint candidates, each into a staging directory of its own (they may share `out`)
        self.shard = shard
        self.cache = cache
        self.notes: list[str] = []
        user_event = on_event or (lambda e: None)

        def emit(e: Event) -> None:
            if e.kind == "note":
                self.notes.append(e.message)
            user_event(e)

        self.emit = on_event = emit
        self.foreign: dict[str, str] = {}  # package under test -> where the tests import it from, if elsewhere
        #: how another machine opens its sandboxes (None: a `sandbox_factory` was given, which cannot travel)
        self.sandbox_spec: tuple[str, SandboxOptions] | None = None
        if sandbox_factory is None:
            be = backend_from_config(config, backend)
            opts = options or SandboxOptions()
            self.sandbox_spec = (be, opts)

            def sandbox_factory(src: RepoSource) -> Sandbox:
                return open_sandbox(src, be, opts)

        #: evaluates candidates in the workers' sandboxes (tests reach its `sandbox()` and `screen_timeout`)
        staging = own_dir(self.out / staging_for(shard), "the staging directory")
        self.engine = Evaluator(self.source, staging, seed=seed, settings=self.settings, opener=sandbox_factory)
        self._unit_env: Any = None  # what candidates take to another machine (`submit`), made on first use
        self.engine.existing = _scan_existing(self.out, self.engine.staging, seed)
        self.last_messages: dict[str, str] = {}  # status -> the first discard message with it (diagnosis)
        self.setup_sandbox: Sandbox | None = None
        self.profile: Profile | None = None
        self.testmap: TestMap | None = None
        self.commits: list[Commit] = []

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        self.close(interrupted=exc_type is not None)

    def close(self, interrupted: bool = False) -> None:
        """Close every sandbox and drop the staging directory; `interrupted` (the run did not finish): keep
        its valid artifacts there, for a rerun of the same seed to reuse (they are its work, in its order)."""
        self.engine.close()
        if not interrupted:
            shutil.rmtree(self.engine.staging, ignore_errors=True)
            return
        kept = _keep_valid(self.engine.staging)
        if kept:
            self.emit(Event("note", f"the run did not finish: {plural(kept, 'valid artifact')} kept in "
                                    f"{self.engine.staging}; rerun the same command (same --seed) to reuse "
                                    "them without validating them again"))

    @property
    def repo(self) -> RepoView:
        assert self.engine.repo is not None, "call setup() first"
        return self.engine.repo

    def setup(self, *, history: bool = True) -> None:
        """Detect the runner, map per-test coverage (cached), read the code and the history."""
        sb = self.engine.opener(self.source)
        self.engine.adopt(sb)
        self.setup_sandbox = sb
        self.emit(Event("phase", "detecting the test runner"))
        from .runner import list_python_files

        self.profile = load_profile(sb, dataclasses.asdict(self.inject), list_python_files(sb))
        fingerprint = repo_fingerprint(sb)
        head = sb.run("git rev-parse HEAD", timeout=timeouts.FEW_FILES)
        self.engine.base_commit = head.output.strip() if head.ok and head.output.strip() else None
        self.emit(Event("phase", f"mapping per-test coverage ({self.profile.runner})"))
        cov_timeout = float(self.inject.coverage_timeout or COVERAGE_TIMEOUT)
        self.testmap = build_testmap(sb, self.profile.full_command(), python=self.profile.python,
                                     timeout=cov_timeout, test_limit=per_test_limit(self.settings.timeout),
                                     file_limit=self.settings.timeout,
                                     fingerprint=fingerprint, environment=environment_key(sb.options),
                                     cache=self.cache)
        self.engine.repo = RepoView(sb, self.testmap, self.profile, self.settings, self.test_patterns)
        if not self.testmap.complete:
            self.emit(Event("note", f"the suite did not finish within its coverage timeout "
                                    f"({cov_timeout:g}s); using the "
                                    f"{len(self.testmap.outcomes)} tests that ran (raise [inject] coverage_timeout "
                                    f"for the rest)"))
        for line in self.engine.repo.notes():
            self.emit(Event("note", line))
        if self.testmap.tracer:
            self.emit(Event("note", f"per-test coverage measured by {self.testmap.tracer}"))
        self.foreign = foreign_imports(sb, self.profile.python)
        for name, where in sorted(self.foreign.items()):
            self.emit(Event("note", f"the tests import {name} from {where}, not from the workspace"))
        # a mutant may loop forever: screening runs get a few times the whole suite's duration
        auto = max(MIN_SCREEN_TIMEOUT, SCREEN_TIMEOUT_FACTOR * self.testmap.seconds)
        self.engine.screen_timeout = min(self.settings.timeout, float(self.inject.screen_timeout or auto))
        self.engine.estimate_timeouts = not self.inject.screen_timeout  # each run: from its tests' time
        if history:
            self.commits = list_commits(sb, self.test_patterns, rev=self.engine.base_commit or "HEAD",
                                        test_files=self.repo.test_files)

    def stream(self, strategy: str, pool: list[Outcome] | None = None) -> Iterator[Candidate]:
        """The seeded candidate stream of one strategy (`combine` needs the pool of valid outcomes)."""
        return candidate_stream(strategy, seed=self.seed, repo=self.repo, sandbox=self.setup_sandbox,
                                commits=self.commits, pool=pool)

    def diagnose(self, stats: dict[str, StrategyStats]) -> list[str]:
        """Why a run wrote nothing: the stage that ran dry, its top reasons, the setting that would change it."""
        repo = self.repo
        lines: list[str] = []
        foreign = "; ".join(f"{n} is imported from {w}" for n, w in sorted(self.foreign.items()))
        if not repo.passing:
            lines.append(f"no test passes on the original code ({len(repo.tm.outcomes)} ran; "
                         f"{listing(repo.notes()) or 'see the test output'})")
            lines.append("setting: [inject] python or test_command in ssrkit.toml, or run ssrkit with the "
                         "virtualenv activated in which the repository's tests pass")
            return lines
        covered = {p: m for p, m in repo.modules.items() if m.covered}
        if not covered:
            measured = [p for p in repo.tm.files if p.endswith(".py")]
            lines.append(f"no covered function: the {len(repo.passing)} passing tests execute no code file of "
                         f"the repository outside the test patterns ({len(measured)} measured file(s)"
                         + (f": {listing(measured, 3)}" if measured else "") + ")")
            if foreign:
                lines.append(f"the package under test is not the workspace's: {foreign}")
                lines.append("setting: install the repository itself into that environment (pip install -e .), or "
                             "[sandbox] env = {PYTHONPATH = \"<dir holding the package>\"} in ssrkit.toml")
            else:
                lines.append("setting: [validate] test_patterns in ssrkit.toml (the code may lie under a "
                             "directory a test pattern names)")
            return lines
        tried = sum(st.tried for st in stats.values())
        if not tried:
            lines.append(f"no candidate: {len(covered)} covered module(s), but no operator applies to a line "
                         "that a passing test executes" + (" and the history has no revertable commit"
                                                            if HISTORY in stats else ""))
            unused = [s for s in STRATEGIES if s not in stats]
            lines.append(f"setting: --strategy {','.join(STRATEGIES)} (all strategies: this run left out "
                         f"{', '.join(unused)}), or more tests in [inject] args" if unused else
                         "setting: more tests in [inject] args (tests that execute more of the code)")
            return lines
        counts: dict[str, int] = {}
        for st in stats.values():
            for k, v in st.statuses.items():
                counts[k] = counts.get(k, 0) + v
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        lines.append(f"every one of the {tried} candidate(s) was discarded: "
                     + ", ".join(f"{k} {v}" for k, v in top))
        example = self.last_messages.get(top[0][0]) if top else None
        if example:
            lines.append(f"e.g. {top[0][0]}: {tail(example, 240)}")
        if foreign:
            lines.append(f"the package under test is not the workspace's: {foreign}")
        lines.append("setting: " + _HINTS.get(top[0][0] if top else "", "--max-tries (more candidates per strategy)"))
        return lines

    def evaluate(self, cand: Candidate) -> Outcome:
        """Pre-screen, weaken, write and validate one candidate (in this thread's worker sandbox)."""
        return self.engine.evaluate(cand)

    def submit(self, pool: Executor, cand: Candidate) -> Future:
        """Evaluate `cand` as a unit of `pool`: in a worker's sandbox here, or (a portable executor) in a
        fresh sandbox on whichever machine runs it; `receive` takes what comes back."""
        if not pool.portable:
            return pool.submit(self.evaluate, cand)
        from .evaluate import CandidateEnv, candidate_unit

        if self._unit_env is None:
            if self.sandbox_spec is None:
                raise SsrkitError("a custom sandbox factory cannot travel to another machine; give backend and "
                                  "options instead, or use the local executor")
            ev = self.engine
            self._unit_env = CandidateEnv(pool.source_ref(self.source), self.seed, self.settings,
                                          self.repo.for_evaluation(), ev.base_commit, ev.screen_timeout,
                                          ev.existing, *self.sandbox_spec, str(ev.staging),
                                          ev.estimate_timeouts)
        return pool.submit(candidate_unit, self._unit_env, cand)

    def receive(self, pool: Executor, result: Any) -> Outcome:
        """The outcome of a unit from `submit`: a portable unit's artifact files are written into staging
        here; tests found flaky are never selected again (the note says which)."""
        outcome = result
        if pool.portable:
            outcome, files = result
            if files is not None and outcome.artifact is not None:
                write_tree(outcome.artifact, files, last=(METADATA, VALIDATION))
        flaky = self.repo.exclude_flaky(outcome.flaky)
        if flaky:
            self._unit_env = None  # the next units select without them
            self.emit(Event("note", f"excluded {plural(len(flaky), 'test')} that passed under coverage "
                                    f"but failed on the original code (flaky): {listing(flaky)}"))
        return outcome

    def run(self, n: int, *, jobs: int = 1, strategies: tuple[str, ...] = STRATEGIES,
            max_tries: int | None = None, executor: Executor | None = None,
            ) -> tuple[list[InjectedArtifact], dict[str, StrategyStats]]:
        """`n` valid artifacts (of this session's shard: give each shard its share of the round's n).
        Each candidate is a unit of `executor` (default: the local pool of `jobs` worker sandboxes)."""
        strategies = parse_strategies(strategies)
        quotas = _quotas(n, strategies)

        def cap(q: int) -> int:
            return max_tries if max_tries is not None else 20 * q + 20

        streams = {s: _Stream(s, quotas[s], self.stream(s) if s != COMBINE else None, cap(quotas[s]),
                              shard=self.shard) for s in strategies}
        base_streams = [streams[s] for s in strategies if s != COMBINE]
        self.emit(Event("phase", f"injecting {n} bug(s): {', '.join(f'{s} {quotas[s]}' for s in strategies)}"))
        with ExitStack() as stack:
            pool = executor if executor is not None else stack.enter_context(LocalExecutor(jobs))
            _settle(self, base_streams, pool)
            comb = streams.get(COMBINE)
            if comb is not None and comb.quota > 0:
                comb.it = self.stream(COMBINE, [o for s in base_streams for o in s.kept])
                _settle(self, [comb], pool)
                deficit = comb.quota - len(comb.kept)
                if deficit > 0:
                    comb.quota = len(comb.kept)
                    if _redistribute(base_streams, deficit):
                        _settle(self, base_streams, pool)
        artifacts = _finalize([streams[s] for s in strategies], self.out, self.engine.staging)
        stats = {}
        for s in strategies:
            st = stats[s] = StrategyStats(runs=0, seconds=0.0)
            for o in streams[s].results.values():
                st.tried += 1
                st.valid += o.valid
                st.runs += o.runs  # type: ignore[operator]
                st.seconds += o.seconds  # type: ignore[operator]
                st.count(o.status)
            st.kept = len(streams[s].kept)
        return artifacts, stats


def inject(
    repo: RepoSource | str | Path,
    out: str | Path,
    *,
    n: int = 10,
    jobs: int = 1,
    seed: int = 0,
    strategies: str | tuple[str, ...] | list[str] = STRATEGIES,
    config: Config | None = None,
    backend: str | None = None,
    options: SandboxOptions | None = None,
    settings: Settings | None = None,
    max_tries: int | None = None,
    cache: bool = True,
    on_event: Callable[[Event], None] | None = None,
    sandbox_factory: Callable[[RepoSource], Sandbox] | None = None,
    shard: Shard | None = None,
    executor: Executor | None = None,
) -> InjectReport:
    """Inject `n` valid bugs into a repository; write each as `out/<id>/` with its validation.json, and
    the run's report as `out/inject.json`.

    `repo` is a RepoSource or a local path. The `[inject]` section of the configuration (the repository's
    ssrkit.toml, then the user's) gives the test runner profile; `[validate]` the thresholds and the
    per-run timeout. Strategies share `n` evenly (in the order given); one that runs dry passes its share
    on. `sandbox_factory` replaces `open_sandbox(source, backend, options)` (local executor only).
    Each candidate is a unit of `executor` (default: a local pool of `jobs` worker sandboxes); the coverage
    map and the scheduling stay in this process, so a portable one (Ray) gives the same artifacts.
    """
    started = time.monotonic()
    if n < 1:
        raise SsrkitError("--n must be at least 1")
    if jobs < 1:
        raise SsrkitError("--jobs must be at least 1")
    strategies = parse_strategies(strategies)
    with Session(repo, out, seed=seed, config=config, settings=settings, backend=backend, options=options,
                 cache=cache, on_event=on_event, sandbox_factory=sandbox_factory, shard=shard) as session:
        session.setup(history=HISTORY in strategies)
        artifacts, stats = session.run(n, jobs=jobs, strategies=strategies, max_tries=max_tries,
                                       executor=executor)
        try:
            session.config.write(session.out / INJECT_CONFIG)
        except OSError:
            pass
        assert session.profile is not None and session.testmap is not None
        report = InjectReport(AGENT, n, list(artifacts), stats, seconds=time.monotonic() - started,
                              runner=session.profile.runner, n_tests=len(session.testmap.outcomes),
                              coverage_seconds=session.testmap.seconds, tracer=session.testmap.tracer,
                              notes=list(session.notes), diagnosis=[] if artifacts else session.diagnose(stats))
    report.write(out, shard)
    return report


def _redistribute(streams: list[_Stream], deficit: int) -> bool:
    """Give `deficit` more artifacts to the streams that can still produce; False if none can."""
    live = [s for s in streams if not s.dry()]
    if not live:
        return False
    for i in range(deficit):
        live[i % len(live)].quota += 1
    return True


def _settle(session: Session, streams: list[_Stream], pool: Executor) -> None:
    """Run streams to their quotas; pass the share of a stream that runs dry on; drop duplicate bugs."""
    while True:
        _run_streams(session, streams, pool)
        seen: set[str] = set()
        deficit = 0
        for s in streams:
            s.kept = []
            for i in sorted(s.results):
                o = s.results[i]
                if not o.valid:
                    continue
                if o.bug_key in seen:
                    o.status, o.message = "duplicate", "same bug as an artifact of another strategy"
                    continue
                if len(s.kept) < s.quota:
                    s.kept.append(o)
            seen.update(o.bug_key for o in s.kept if o.bug_key)
            if len(s.kept) < s.quota and s.dry():
                deficit += s.quota - len(s.kept)
                s.quota = len(s.kept)
        if any(len(s.kept) < s.quota and not s.dry() for s in streams):
            continue  # a duplicate was dropped: that stream needs another one
        if deficit and _redistribute(streams, deficit):
            continue
        return


def _finalize(streams: list[_Stream], out: Path, staging: Path) -> list[InjectedArtifact]:
    """Move kept artifacts from `staging` to out/<id>; everything else in staging is dropped."""
    result = []
    for s in streams:
        for o in s.kept:
            c = o.candidate
            if o.status == REUSED and o.artifact is not None and o.artifact.parent != staging:
                dest = o.artifact
            else:
                dest = own_dir(out / check_name(o.artifact_id or "", "artifact id"), "the artifact directory")
                if dest.exists():
                    shutil.rmtree(dest)
                shutil.move(str(o.artifact), str(dest))
                art = Artifact(dest)
                v = art.validation
                if v is not None:
                    v["artifact"] = str(dest)
                    atomic_write_json(dest / VALIDATION, v)
            result.append(InjectedArtifact(o.artifact_id or dest.name, dest, c.strategy, c.operator, c.target,
                                           c.detail, reused=o.status == REUSED))
    return result
