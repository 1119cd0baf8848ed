"""Consistency validation of bug artifacts (SPEC §2).

Each check is a small named function over one `_Context`. Static checks read files only; execution checks
run the artifact's tests in a sandbox. A check runs only when the checks it needs passed, so the first
failure is the one reported and nothing is executed on an artifact that cannot be applied.

The original-code run depends only on (repository state, test_script.sh, test_parser.py), so it is cached on
disk and shared by every artifact with the same triple.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from . import __version__
from . import patch as patches
from .store.artifact import (ATTEMPTS, BUG_DIFF, CORE_FILES, TEST_FILES, TEST_PARSER, TEST_SCRIPT, VALIDATION, WEAKEN_DIFF,
                             ALIASES, Artifact, log_path, now_iso, parser_stderr_path)
from .store.cache import original_runs_dir
from .store.config import Config
from .errors import PatchError, SsrkitError
from .executor import ArtifactRef, SourceRef, relabel
from .store.fsutil import atomic_write_json, atomic_write_text, read_json
from .sandbox import PRISTINE, Sandbox, SandboxOptions, environment_key, open_sandbox
from .store.source import RepoSource
from .verdict.patterns import DEFAULT_TEST_PATTERNS, is_test_like
from .runslots import Ahead, RunSlots
from .testrun import FAILED, PARSER_TIMEOUT, PASSED, TEST_TIMEOUT, TestRun, run_parser, run_tests, why_no_tests
from .text import clip
from .units import path_mapping, scratch_for

if TYPE_CHECKING:
    from .executor import Executor

PASS, FAIL, WARN, SKIP = "passed", "failed", "warning", "skipped"

STATIC_CHECKS = ("files", "diffs_parse", "test_files_exist", "weaken_scope", "bug_scope", "applies")
EXECUTION_CHECKS = ("parser", "original_passes", "bug_breaks", "weaken_hides", "inverse_mutation")
CHECK_NAMES = STATIC_CHECKS + EXECUTION_CHECKS


@dataclass
class Settings:
    """Thresholds and budgets (the `[validate]` config section)."""

    timeout: float = TEST_TIMEOUT
    min_passing_tests: int = 5
    min_failing_tests: int = 1
    min_changed_files: int = 1
    total_break: str = "warning"  # "warning" or "error"
    flaky_runs: int = 0
    jobs: int = 1
    test_patterns: list[str] = field(default_factory=lambda: list(DEFAULT_TEST_PATTERNS))
    cache: bool = True
    #: seconds a parse of one log may take (counted from the end of the tests)
    parser_timeout: float = PARSER_TIMEOUT
    #: seconds of test runs (parses included, waits for a run slot not) one artifact may use; 0: `wall_budget`'s default
    budget: float = 0.0

    @classmethod
    def from_config(cls, cfg: Config, **flags: Any) -> "Settings":
        """`[validate]` of the resolved configuration, then `flags` (None = not given)."""
        return cls.from_section(cfg.override("validate", **flags).section("validate"))

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> "Settings":
        known = {f for f in cls.__dataclass_fields__}
        s = cls(**{k: v for k, v in section.items() if k in known})
        if s.total_break not in ("warning", "error"):
            raise SsrkitError(f"validate.total_break must be 'warning' or 'error', not {s.total_break!r}")
        if s.timeout <= 0:
            raise SsrkitError("the test timeout must be positive")
        if s.parser_timeout <= 0:
            raise SsrkitError("validate.parser_timeout must be positive")
        if s.budget < 0:
            raise SsrkitError("validate.budget must be 0 (as many runs as the checks need, each at its full "
                              "timeout) or a positive number of seconds")
        if s.jobs < 1:
            raise SsrkitError("--jobs must be at least 1")
        return s

    @property
    def wall_budget(self) -> float:
        """`budget`, or by default what the checks' runs take when each takes its whole time (the original,
        bug, bug+weaken and one inverse-mutation run, and the flaky runs): a hostile artifact costs this much
        of a run slot and no more."""
        if self.budget:
            return self.budget
        return (4 + self.flaky_runs) * (self.timeout + self.parser_timeout)

    def key(self) -> str:
        d = asdict(self)
        d.pop("jobs")
        d.pop("cache")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]


@dataclass
class Check:
    name: str
    status: str
    message: str
    seconds: float = 0.0


@dataclass
class Report:
    """What `validation.json` holds (one element of `ssrkit validate --json`)."""

    artifact: str
    valid: bool
    checks: list[Check]
    #: the tests the bug breaks and those it leaves passing, as bug_breaks measured them (also when a later
    #: check fails; empty when bug_breaks did not run): only a valid artifact's are a task's
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: dict[str, Any] = field(default_factory=dict)
    #: the original run (and the parser's verdict on it) came from the original-run cache: no command ran for it
    original_cached: bool = False
    source: dict[str, Any] = field(default_factory=dict)
    #: the thresholds used, and `isolation`: what the sandbox isolated while the artifact's code ran
    settings: dict[str, Any] = field(default_factory=dict)
    content_id: str = ""
    settings_key: str = ""
    #: `sandbox.environment_key` of the validating process: a verdict is reused only under the same one
    environment: str = ""
    seconds: float = 0.0
    #: {"seconds": the artifact's budget of test runs (`Settings.wall_budget`), "used": what its runs took}
    budget: dict[str, float] = field(default_factory=dict)
    created: str = ""
    ssrkit_version: str = __version__
    #: raw logs of the runs, written to logs/ rather than into validation.json
    logs: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("logs")
        d["checks"] = [asdict(c) | {"seconds": round(c.seconds, 3)} for c in self.checks]
        d["seconds"] = round(self.seconds, 3)
        return d

    @property
    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if c.status == FAIL), None)


# -- test-like files -------------------------------------------------------------------------------


# -- the original-run cache ------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where original-code runs are cached (`store.cache`)."""
    return original_runs_dir()


class OriginalRunCache:
    """Original-code runs keyed by (repository state, test script, parser, timeout); in memory and on disk."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._mem: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(fingerprint: str, environment: str, script: str, parser: str, timeout: float) -> str:
        """`fingerprint`: the repository state; `environment`: what the commands run with (`environment_key`)."""
        h = hashlib.sha256()
        for part in (fingerprint, environment, script, parser, f"{timeout:g}", __version__):
            h.update(part.encode("utf-8", "replace") + b"\0")
        return h.hexdigest()[:32]

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Artifacts sharing a key wait for the first one's run instead of repeating it."""
        with self._guard:
            lk = self._locks.setdefault(key, threading.Lock())
        with lk:
            yield

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        if key in self._mem:
            self.hits += 1
            return self._mem[key]
        p = cache_dir() / f"{key}.json"
        if p.is_file():
            try:
                entry = read_json(p)
                entry["log"] = (cache_dir() / f"{key}.log").read_text(encoding="utf-8")
            except (OSError, ValueError):
                return None
            self._mem[key] = entry
            self.hits += 1
            return entry
        return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self.misses += 1
        if not self.enabled:
            return
        self._mem[key] = entry
        try:
            d = cache_dir()
            d.mkdir(parents=True, exist_ok=True)
            atomic_write_text(d / f"{key}.log", entry["log"])
            atomic_write_json(d / f"{key}.json", {k: v for k, v in entry.items() if k != "log"})
        except OSError:
            pass  # the cache is an optimization; a read-only home must not fail validation


# -- one validation --------------------------------------------------------------------------------

class _Context:
    """Everything the checks share for one artifact: files, parsed diffs, sandboxes and runs."""

    def __init__(self, artifact: Artifact, source: RepoSource, settings: Settings, engine: "Validator",
                 known: dict[str, TestRun] | None = None):
        self.artifact = artifact
        self.source = source
        self.settings = settings
        self.engine = engine
        self.known = dict(known or {})
        self.original_cached = False
        self.texts = artifact.core_texts()
        self.bug_files: list[str] = []
        self.bug_changes: list[patches.FileChange] = []
        self.weaken_files: list[str] = []
        self.test_files = artifact.test_files
        self.runs: dict[str, TestRun] = {}
        self.fail_to_pass: list[str] = []
        self.pass_to_pass: list[str] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self._stack = ExitStack()
        self._sandbox: Sandbox | None = None
        #: the verdicts so far, in check order (the runner fills it)
        self.results: dict[str, Check] = {}
        self._ahead: dict[str, Ahead[TestRun]] = {}
        self.isolation: dict[str, Any] = {"note": "no command ran (static checks only, or the original run was cached)"}
        #: seconds of test runs used so far (`Settings.wall_budget`)
        self.used = 0.0
        self._used_lock = threading.Lock()
        #: the run whose log the parser did not parse in time: it is not run on this artifact again
        self.hung: str | None = None

    # sandboxes are opened lazily: an artifact failing its static checks costs no workspace
    def sandbox(self) -> Sandbox:
        if self._sandbox is None:
            self._sandbox = self._stack.enter_context(self.engine.open(self.source))
            self.isolation = self._sandbox.isolation
        return self._sandbox

    def close(self) -> None:
        for ahead in self._ahead.values():  # made ahead for a check that never came
            ahead.drop()
        self._ahead.clear()
        self._stack.close()

    def repo_has(self, path: str) -> bool:
        if self.source.kind == "local":
            return (Path(self.source.path) / path).exists()
        res = self.sandbox().run(f"test -e {_shq(path)}", timeout=30)
        return res.exit_code == 0

    def diffs(self, run: str) -> list[tuple[str, str]]:
        """The (label, diff) pairs applied, in order, for the run named `run` ("bug", "bug+weaken")."""
        labels = {"bug": (BUG_DIFF,), "bug+weaken": (BUG_DIFF, WEAKEN_DIFF)}[run]
        return [(label, self.texts[label]) for label in labels]

    def test_run(self, sandbox: Sandbox, name: str, diffs: list[tuple[str, str]], *,
                 checks: list[tuple[str, str]] = (), parse_twice: bool = False,
                 ahead: list[tuple[str, list[tuple[str, str]]]] = ()) -> TestRun:
        """Reset, apply `diffs` in order, run the tests; record the run under `name` (a run made already,
        or ahead, or handed over by the caller under that name in `known`, is used instead of running it
        again). `checks`: diffs that must apply on top, checked before the tests run. `parse_twice`: the log
        is parsed twice at once (`TestRun.reparsed`), for the determinism check. `ahead`: later runs (name,
        diffs) to make in sandboxes of their own when a run slot is idle (`_run_ahead`)."""
        made = self._ahead.pop(name).claim() if name in self._ahead else None
        done = made or self.runs.get(name) or self.known.get(name)
        if done is not None:
            self.runs[name] = done
            self._note_hang(name, done)
            return done
        if self.hung is not None:
            raise _Stop(self.hang_message())
        for later, later_diffs in ahead if sandbox.backend == "local" else ():
            self._run_ahead(later, later_diffs)
        sandbox.reset(PRISTINE)
        with self.engine.slot():
            left = self.budget_left()
            t0 = time.monotonic()
            try:
                run = run_tests(sandbox, self.texts[TEST_SCRIPT], self.texts[TEST_PARSER],
                                timeout=min(self.settings.timeout, left), diffs=diffs, checks=checks,
                                parse_twice=parse_twice, parser_timeout=self.settings.parser_timeout,
                                limit=time.time() + left)
            finally:
                self._use(time.monotonic() - t0)
        if run.timed_out:
            cut = left < self.settings.timeout
        else:
            cut = run.parse_timed_out and left - run.seconds < self.settings.parser_timeout
        if cut:  # the budget ended the tests or the parse: no verdict of this run's own
            raise _Stop(self.budget_message())
        self.runs[name] = run
        self._note_hang(name, run)
        return run

    # -- the budget ------------------------------------------------------------------------------------
    def budget_left(self) -> float:
        """Seconds of test runs left to this artifact; `_Stop` when none is."""
        with self._used_lock:
            left = self.settings.wall_budget - self.used
        if left <= 0:
            raise _Stop(self.budget_message())
        return left

    def _use(self, seconds: float) -> None:
        with self._used_lock:
            self.used += seconds

    def budget_message(self) -> str:
        return (f"the artifact's budget of {self.settings.wall_budget:g}s of test runs is spent ({self.used:.0f}s "
                f"used); its validation stops here — raise [validate] budget if its tests need longer")

    def _note_hang(self, name: str, run: TestRun) -> None:
        if run.parse_timed_out and self.hung is None:
            self.hung = name

    def hang_message(self) -> str:
        return (f"test_parser.py did not finish within {self.settings.parser_timeout:g}s on the {self.hung} run's "
                f"log ({self.artifact.path / log_path(self.hung)}); it is not run again on this artifact")

    def parsed(self, name: str) -> TestRun:
        """Run `name`, which a check judges: `_Stop` when its log could not be parsed (a parser that fails on
        the log of a broken build must say so, not make every test look failed)."""
        run = self.runs[name]
        if run.parse_error:
            raise _Stop(f"on the {name} run's log ({self.artifact.path / log_path(name)}): {run.parse_error}")
        return run

    def _run_ahead(self, name: str, diffs: list[tuple[str, str]]) -> None:
        """Make run `name` in a sandbox of its own as soon as a run slot is idle (`runslots`: the end of a
        round, --jobs above the artifacts left); its check takes it then, or runs it itself if no slot came
        by. Local sandboxes only: a workspace costs milliseconds there, where a container's start can
        outlast the run it would bring forward."""
        if name in self.runs or name in self._ahead or name in self.known or self.settings.jobs < 2:
            return

        def make() -> TestRun:
            with self.engine.open(self.source) as sb:
                return run_tests(sb, self.texts[TEST_SCRIPT], self.texts[TEST_PARSER],
                                 timeout=self.settings.timeout, diffs=diffs,
                                 parser_timeout=self.settings.parser_timeout)

        self._ahead[name] = Ahead(self.engine.slots, make)


def _shq(s: str) -> str:
    import shlex

    return shlex.quote(s)


class _Stop(Exception):
    """A check cannot go on: its message is the check's failure (the budget is spent, the parser hangs)."""


CheckFn = Callable[[_Context], tuple[str, str]]


def check_files(ctx: _Context) -> tuple[str, str]:
    problems = []
    for name in CORE_FILES:
        p = ctx.artifact.file(name)
        aliases = ALIASES.get(name, ())
        also = f" (or {', '.join(aliases)})" if aliases else ""
        if p is None:
            problems.append(f"{name}{also} is missing")
        elif not ctx.texts[name].strip():
            problems.append(f"{name} is empty")
    if problems:
        return FAIL, "; ".join(problems) + ". Every artifact needs the five files, none empty."
    return PASS, "all five files present"


def check_diffs_parse(ctx: _Context) -> tuple[str, str]:
    try:
        ctx.bug_files = patches.check_paths(ctx.texts[BUG_DIFF], BUG_DIFF)
        ctx.bug_changes = patches.parse(ctx.texts[BUG_DIFF], BUG_DIFF)
        ctx.weaken_files = patches.check_paths(ctx.texts[WEAKEN_DIFF], WEAKEN_DIFF)
    except PatchError as e:
        return FAIL, str(e)
    if not ctx.bug_changes:
        return FAIL, f"{BUG_DIFF} changes no file"
    if not ctx.weaken_files:
        return FAIL, f"{WEAKEN_DIFF} changes no file"
    return PASS, f"bug changes {len(ctx.bug_changes)} file(s), weakening changes {len(ctx.weaken_files)}"


def check_test_files_exist(ctx: _Context) -> tuple[str, str]:
    files = ctx.test_files
    if not files:
        return FAIL, f"{TEST_FILES} lists no test file"
    dups = sorted({f for f in files if files.count(f) > 1})
    if dups:
        return FAIL, f"{TEST_FILES} lists {', '.join(dups)} more than once"
    for f in files:
        reason = patches.unsafe_path_reason(f)
        if reason:
            return FAIL, f"{TEST_FILES} lists {f!r}: {reason}"
    missing = [f for f in files if not ctx.repo_has(f)]
    if missing:
        return FAIL, (f"{TEST_FILES} lists {', '.join(missing)}, not in the original repository "
                      f"({ctx.source.label}); list repository-relative paths of existing test files")
    return PASS, f"{len(files)} test file(s) listed"


def check_weaken_scope(ctx: _Context) -> tuple[str, str]:
    listed = set(ctx.test_files)
    outside = [f for f in ctx.weaken_files if f not in listed]
    if outside:
        return FAIL, (f"{WEAKEN_DIFF} changes {', '.join(outside)}, not listed in {TEST_FILES}; "
                      f"add them to {TEST_FILES} or drop those hunks")
    return PASS, "weakening touches only listed test files"


def check_bug_scope(ctx: _Context) -> tuple[str, str]:
    listed = set(ctx.test_files)
    bad = [f for f in ctx.bug_files if f in listed or is_test_like(f, ctx.settings.test_patterns)]
    if bad:
        return FAIL, (f"{BUG_DIFF} changes test file(s) {', '.join(bad)}; the bug must touch code only "
                      f"(move test changes to {WEAKEN_DIFF})")
    n = len(ctx.bug_changes)
    if n < ctx.settings.min_changed_files:
        return FAIL, f"{BUG_DIFF} changes {n} file(s); at least {ctx.settings.min_changed_files} required"
    return PASS, f"bug touches code only ({n} file(s))"


def check_applies(ctx: _Context) -> tuple[str, str]:
    """Both diffs apply, in order. When every other static check passed, this is the bug run itself (the bug
    applied, the weakening checked on top, then the tests; `check_bug_breaks` uses it): one command fewer
    per artifact, for a bug run made early on an artifact whose original run then fails."""
    sb = ctx.sandbox()
    both = ctx.diffs("bug+weaken")
    with_run = "bug" not in ctx.known and all(ctx.results[n].status in (PASS, WARN) for n in STATIC_CHECKS[:-1])
    try:
        if with_run:
            ctx.test_run(sb, "bug", both[:1], checks=both[1:], ahead=[("bug+weaken", both)])
        else:  # one command for both
            sb.reset(PRISTINE)
            sb.apply_patches(both)
    except PatchError as e:
        where = (f"applied on top of {BUG_DIFF}" if getattr(e, "label", None) == WEAKEN_DIFF
                 else f"applied to the original repository {ctx.source.label}")
        return FAIL, f"{e} ({where})"
    return PASS, "both diffs apply" + (" (the bug run was made with this check)" if with_run else "")


def check_parser(ctx: _Context) -> tuple[str, str]:
    if ctx.hung is not None:  # on the bug run's log (made with `applies`): no second hang on the original's
        return FAIL, ctx.hang_message()
    engine = ctx.engine
    fp = engine.fingerprint(ctx.source)
    key = OriginalRunCache.key(fp, engine.environment, ctx.texts[TEST_SCRIPT], ctx.texts[TEST_PARSER],
                               ctx.settings.timeout)
    with engine.cache.lock(key):
        entry = engine.cache.get(key)
        if entry is None:
            sb = ctx.sandbox()
            run = ctx.test_run(sb, "original", [], parse_twice=True, ahead=[("bug+weaken", ctx.diffs("bug+weaken"))])
            status, message = _judge_parser(ctx, sb, run)
            entry = {"run": run.summary(), "log": run.log, "parser": [status, message],
                     "parser_stderr": run.parser_stderr}
            if not run.parse_timed_out:  # how long a parse takes is the machine's as much as the parser's
                engine.cache.put(key, entry)
        else:
            ctx.runs["original"] = TestRun.from_summary(entry["run"], entry["log"])
            ctx.runs["original"].parser_stderr = entry.get("parser_stderr", "")
            ctx.original_cached = True
            ctx.notes.append("original run taken from the cache")
    status, message = entry["parser"]
    if ctx.original_cached and status == PASS:
        message += " (original run cached)"
    return status, message


def _judge_parser(ctx: _Context, sb: Sandbox, run: TestRun) -> tuple[str, str]:
    if run.timed_out:
        return FAIL, (f"{TEST_SCRIPT} did not finish within {ctx.settings.timeout:g}s on the original code; "
                      f"select fewer tests or raise --timeout, or find what hangs in the log's last lines "
                      f"({ctx.artifact.path / log_path('original')})")
    if run.parse_error:
        kept = f"; its stderr: {ctx.artifact.path / parser_stderr_path('original')}" if run.parser_stderr else ""
        return FAIL, f"on the original run's log: {run.parse_error}{kept}"
    if not run.statuses:
        return FAIL, (f"test_parser.py found no test in the original run's log (exit code {run.exit_code}): "
                      f"{why_no_tests(run.log, run.exit_code, ctx.texts[TEST_SCRIPT])} — see "
                      f"{ctx.artifact.path / log_path('original')}")
    again = run.reparsed
    if again is None and "original" in ctx.known:  # a run handed over: parsed once only
        again, _error, _ = run_parser(sb, ctx.texts[TEST_PARSER], run.log, timeout=ctx.settings.parser_timeout)
    if again != run.statuses:
        return FAIL, "test_parser.py gave a different result when run twice on the same log; it must be deterministic"
    return PASS, f"{len(run.statuses)} test(s) parsed"


def check_original_passes(ctx: _Context) -> tuple[str, str]:
    run = ctx.runs["original"]
    bad = sorted(t for t, s in run.statuses.items() if s != PASSED)
    if bad:
        shown = ", ".join(f"{t} ({run.statuses[t]})" for t in bad[:5])
        more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
        return FAIL, (f"{len(bad)} test(s) do not pass on the original code: {shown}{more}; "
                      f"deselect them in {TEST_SCRIPT} (flaky or environment-dependent tests do not belong)"
                      + _missing_module_hint(run.log))
    n = len(run.statuses)
    if n < ctx.settings.min_passing_tests:
        return FAIL, (f"only {n} test(s) pass on the original code; at least {ctx.settings.min_passing_tests} "
                      f"required — select more test files in {TEST_SCRIPT}")
    for i in range(ctx.settings.flaky_runs):
        ctx.test_run(ctx.sandbox(), f"original-{i + 2}", [])
        again = ctx.parsed(f"original-{i + 2}")
        if again.statuses != run.statuses:
            changed = sorted(t for t in set(run.statuses) | set(again.statuses)
                             if run.statuses.get(t) != again.statuses.get(t))
            return FAIL, (f"flaky: run {i + 2} of the original code changed the status of {len(changed)} "
                          f"test(s), e.g. {', '.join(changed[:3])}; exclude them from {TEST_SCRIPT}")
    extra = f", stable over {ctx.settings.flaky_runs + 1} runs" if ctx.settings.flaky_runs else ""
    return PASS, f"{n} test(s) pass on the original code{extra}"


_MISSING_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")


def _missing_module_hint(log: str) -> str:
    """What to say when the original run could not import a module: the tests' environment is not the one
    the sandbox got (a virtualenv not active, a package not installed), not a test to deselect."""
    missing = sorted(set(_MISSING_MODULE.findall(log)))
    if not missing:
        return ""
    names = ", ".join(repr(m) for m in missing[:3]) + (" ..." if len(missing) > 3 else "")
    return (f"; the log says no module named {names}: activate the virtualenv the tests need before running "
            f"ssrkit (or give the repository's ssrkit.toml a [sandbox] setup)")


def check_bug_breaks(ctx: _Context) -> tuple[str, str]:
    original = ctx.runs["original"].passed
    ctx.test_run(ctx.sandbox(), "bug", ctx.diffs("bug"))
    run = ctx.parsed("bug")
    ctx.fail_to_pass = sorted(t for t in original if run.statuses.get(t) != PASSED)
    ctx.pass_to_pass = sorted(t for t in original if run.statuses.get(t) == PASSED)
    n = len(ctx.fail_to_pass)
    timeout_note = f" (the run timed out after {ctx.settings.timeout:g}s)" if run.timed_out else ""
    if n < ctx.settings.min_failing_tests:
        return FAIL, (f"the bug makes {n} originally passing test(s) fail; at least "
                      f"{ctx.settings.min_failing_tests} required — the selected tests do not notice it{timeout_note}")
    if not ctx.pass_to_pass:
        msg = (f"total_break: the bug makes every one of the {n} selected tests fail{timeout_note}; usually a "
               f"syntax or import error rather than a bug (see {ctx.artifact.path / log_path('bug')})")
        ctx.warnings.append("total_break")
        return (FAIL if ctx.settings.total_break == "error" else WARN), msg
    return PASS, f"{n} test(s) fail with the bug (FAIL_TO_PASS), {len(ctx.pass_to_pass)} still pass{timeout_note}"


def check_weaken_hides(ctx: _Context) -> tuple[str, str]:
    ctx.test_run(ctx.sandbox(), "bug+weaken", ctx.diffs("bug+weaken"))
    run = ctx.parsed("bug+weaken")
    hidden = [t for t in ctx.fail_to_pass if t not in run.statuses or run.statuses[t] == PASSED]
    if not hidden:
        shown = ", ".join(ctx.fail_to_pass[:3]) + (" …" if len(ctx.fail_to_pass) > 3 else "")
        return FAIL, (f"with both diffs applied all {len(ctx.fail_to_pass)} FAIL_TO_PASS test(s) still fail "
                      f"({shown}); {WEAKEN_DIFF} must remove or weaken the tests that reveal the bug")
    still = [t for t in ctx.fail_to_pass if run.statuses.get(t) == FAILED]
    extra = f" ({len(still)} still fail)" if still else ""
    return PASS, f"the weakening hides {len(hidden)} of {len(ctx.fail_to_pass)} FAIL_TO_PASS test(s){extra}"


def check_inverse_mutation(ctx: _Context) -> tuple[str, str]:
    per_file = patches.split_by_file(ctx.texts[BUG_DIFF], BUG_DIFF)
    if len(per_file) == 1:
        # restoring the only file gives the original code, where every FAIL_TO_PASS test passes
        return PASS, "single-file bug: the file contributes by construction"
    f2p = set(ctx.fail_to_pass)
    names = list(per_file)

    def restore(i_path: tuple[int, str]) -> tuple[str, bool]:
        i, path = i_path
        rest = "".join(d for p, d in per_file.items() if p != path)
        with ctx.engine.open(ctx.source) as sb:
            ctx.test_run(sb, f"inverse:{path}", [(f"{BUG_DIFF} without {path}", rest)])
        run = ctx.parsed(f"inverse:{path}")
        return path, any(run.statuses.get(t) == PASSED for t in f2p)

    jobs = min(ctx.settings.jobs, len(names))
    if jobs > 1:
        with ThreadPoolExecutor(jobs) as pool:
            results = list(pool.map(restore, enumerate(names)))
    else:
        results = [restore(x) for x in enumerate(names)]
    idle = [p for p, ok in results if not ok]
    if idle:
        return FAIL, (f"restoring {', '.join(idle)} alone fixes no FAIL_TO_PASS test: {'that file does' if len(idle) == 1 else 'those files do'} "
                      f"not contribute to the bug; drop {'it' if len(idle) == 1 else 'them'} from {BUG_DIFF}")
    return PASS, f"each of the {len(names)} changed files contributes"


#: runs a caller may hand to `Validator.validate(..., known=)`: the artifact's bug on the original code
KNOWN_RUNS = ("bug",)

CHECKS: dict[str, tuple[CheckFn, tuple[str, ...]]] = {
    "files": (check_files, ()),
    "diffs_parse": (check_diffs_parse, ("files",)),
    "test_files_exist": (check_test_files_exist, ("files",)),
    "weaken_scope": (check_weaken_scope, ("diffs_parse", "test_files_exist")),
    "bug_scope": (check_bug_scope, ("diffs_parse",)),
    "applies": (check_applies, ("diffs_parse",)),
    "parser": (check_parser, STATIC_CHECKS),
    "original_passes": (check_original_passes, ("parser",)),
    "bug_breaks": (check_bug_breaks, ("original_passes",)),
    "weaken_hides": (check_weaken_hides, ("bug_breaks",)),
    "inverse_mutation": (check_inverse_mutation, ("bug_breaks",)),
}


class Validator:
    """Validates artifacts; holds what is shared across them (cache, run slots, sandbox settings)."""

    def __init__(self, settings: Settings, *, backend: str = "auto", options: SandboxOptions | None = None):
        self.settings = settings
        self.backend = backend
        self.options = options or SandboxOptions()
        self.cache = OriginalRunCache(settings.cache)
        self.slots = RunSlots(settings.jobs)
        self._fingerprints: dict[RepoSource, str] = {}
        self._fp_lock = threading.Lock()
        #: what the sandboxes' commands run with (part of the original-run cache's key)
        self.environment = environment_key(self.options)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """At most `jobs` test runs at once, whatever mix of artifacts and inverse runs asks."""
        with self.slots.run():
            yield

    def open(self, source: RepoSource):
        return open_sandbox(source, self.backend, self.options)

    def fingerprint(self, source: RepoSource) -> str:
        from .sandbox.factory import fingerprint

        with self._fp_lock:
            if source not in self._fingerprints:
                self._fingerprints[source] = fingerprint(source)
            return self._fingerprints[source]

    def validate(self, artifact: Artifact, source: RepoSource, *, known: dict[str, TestRun] | None = None) -> Report:
        """Run every check on one artifact; nothing is written (see `write_report`).

        `known` maps a run's name (`KNOWN_RUNS`) to a run of exactly that state (original code + the named
        diffs, this artifact's test script and parser) that the caller made earlier, to use instead of
        running it again: the injector, which has just run an artifact's tests with its bug applied, hands
        over `{"bug": run}`."""
        unknown = sorted(set(known or {}) - set(KNOWN_RUNS))
        if unknown:
            raise ValueError(f"known runs {unknown} are not among {KNOWN_RUNS}")
        started = time.monotonic()
        ctx = _Context(artifact, source, self.settings, self, known)
        with self.slots.artifact():
            try:
                _run_checks(ctx)
            finally:
                ctx.close()
        checks = [ctx.results[n] for n in CHECK_NAMES]
        valid = all(c.status in (PASS, WARN) for c in checks)
        return Report(
            artifact=str(artifact.path),
            valid=valid,
            checks=checks,
            fail_to_pass=ctx.fail_to_pass,  # what bug_breaks measured, whatever a later check says
            pass_to_pass=ctx.pass_to_pass,
            warnings=ctx.warnings,
            notes=ctx.notes,
            original_cached=ctx.original_cached,
            runs={name: _run_entry(name, run) for name, run in ctx.runs.items()},
            source=source.to_dict(),
            settings={**{k: v for k, v in asdict(self.settings).items() if k not in ("jobs", "cache")},
                      "isolation": ctx.isolation},
            content_id=artifact.content_id(),
            settings_key=self.settings.key(),
            environment=self.environment,
            seconds=time.monotonic() - started,
            budget={"seconds": self.settings.wall_budget, "used": round(ctx.used, 3)},
            created=now_iso(),
            logs=_logs(ctx.runs),
        )


def _run_checks(ctx: _Context) -> None:
    """Every check in order into `ctx.results`; one whose prerequisites did not pass is skipped."""
    results = ctx.results
    for name, (fn, needs) in CHECKS.items():
        blocked = [n for n in needs if results[n].status not in (PASS, WARN)]
        if blocked:
            results[name] = Check(name, SKIP, f"not run: {blocked[0]} did not pass")
            continue
        t0 = time.monotonic()
        try:
            status, message = fn(ctx)
        except (PatchError, _Stop) as e:
            status, message = FAIL, str(e)
        results[name] = Check(name, status, clip(message), time.monotonic() - t0)


def _logs(runs: dict[str, TestRun]) -> dict[str, str]:
    """The raw logs of the runs, and the parser's stderr of those whose parse failed."""
    out = {log_path(name): run.log for name, run in runs.items()}
    out.update({parser_stderr_path(name): run.parser_stderr for name, run in runs.items() if run.parser_stderr})
    return out


def _run_entry(name: str, run: TestRun) -> dict[str, Any]:
    return run.summary() | {"log": log_path(name)}


def write_report(artifact: Artifact, report: Report) -> None:
    """Write the raw logs, then validation.json (last, so its presence means the logs are there)."""
    for relpath, log in report.logs.items():
        artifact.write_text(relpath, log)
    artifact.write_json(VALIDATION, report.to_dict())


def validate_all(
    items: list[tuple[Artifact, RepoSource]],
    validator: Validator,
    *,
    redo: bool = False,
    write: bool = True,
    on_done: Callable[[Artifact, dict[str, Any], bool], None] | None = None,
    executor: "Executor | None" = None,
) -> list[dict[str, Any]]:
    """Validate many artifacts, `jobs` at a time; reuse an up-to-date validation.json unless `redo`.

    Returns the validation.json objects in the order given. `on_done(artifact, result, reused)` is called
    as each finishes (progress bars). Each validation is a unit of `executor` (default: the local thread
    pool of `jobs`); whichever ran it, this process writes the report.
    """
    from .executor import LocalExecutor, run_units

    results: dict[int, dict[str, Any]] = {}
    todo: list[int] = []
    for i, (artifact, source) in enumerate(items):
        old = None if redo else previous_report(artifact, validator.settings, source, validator.environment)
        if old is not None:
            results[i] = old
            if on_done:
                on_done(artifact, old, True)
        else:
            todo.append(i)
    ex = executor or LocalExecutor(min(validator.settings.jobs, max(1, len(todo))))
    spec: Any = (ValidatorSpec(validator.settings, validator.backend, validator.options, validator.environment)
                 if ex.portable else validator)

    def done(k: int, report: Report) -> None:
        artifact = items[todo[k]][0]
        report.environment = validator.environment  # this process's, which the next reuse compares with
        if write:
            write_report(artifact, report)
        results[todo[k]] = report.to_dict()
        if on_done:
            on_done(artifact, results[todo[k]], False)

    try:
        run_units(ex, validate_unit, [(spec, ex.artifact_ref(items[i][0].path, skip=(ATTEMPTS,)),
                                       ex.source_ref(items[i][1])) for i in todo], done)
    finally:
        if executor is None:
            ex.close()
    return [results[i] for i in range(len(items))]


def previous_report(artifact: Artifact, settings: Settings, source: RepoSource,
                    environment: str) -> dict[str, Any] | None:
    """A saved validation.json still valid for these files, settings, source and environment (so batch runs
    skip it): a verdict made with a virtualenv active, or before a `pip install`, is no answer without it."""
    try:
        data = artifact.validation
    except SsrkitError:
        return None
    if not data:
        return None
    if (data.get("content_id") != artifact.content_id() or data.get("settings_key") != settings.key()
            or data.get("source") != source.to_dict() or data.get("environment") != environment):
        return None
    return data


# -- validate one artifact ------------------------------------------------------------------------------

@dataclass
class ValidatorSpec:
    """What a node needs to build the driver's Validator (one per worker process, kept for its cache)."""

    settings: Any
    backend: str
    options: SandboxOptions
    #: the driver's `environment_key`: what the reports record, so the driver's next run can reuse them
    environment: str = ""


_validators: dict[str, Any] = {}


def cached_validator(spec: Any) -> "Validator":
    """The Validator of `spec` on this machine: the driver's own, or one built once per worker process (its
    original-run cache is kept across the units of a run)."""
    if isinstance(spec, Validator):
        return spec
    key = repr(spec)
    if key not in _validators:
        # one sandbox slot per unit: the inverse-mutation runs of an artifact share it
        _validators[key] = Validator(replace(spec.settings, jobs=1), backend=spec.backend, options=spec.options)
    return _validators[key]


def validate_unit(spec: Any, ref: ArtifactRef, sref: SourceRef):
    """The Report of one artifact (not written)."""
    validator = cached_validator(spec)
    with scratch_for(ref) as scratch:
        path = ref.materialize(scratch) if scratch is not None else Path(ref.origin)
        source = sref.materialize()
        report = validator.validate(Artifact(path), source)
    report.source = sref.source.to_dict()
    return relabel(report, path_mapping(path, ref, source, sref))
