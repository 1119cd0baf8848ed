"""The checks of one artifact (SPEC §2), each a small named function over one `_Context`.

Static checks read files only; execution checks run the artifact's tests in a sandbox. A check runs only when
the checks it needs passed (`CHECKS`), so the first failure is the one reported and nothing is executed on an
artifact that cannot be applied."""

from __future__ import annotations

import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Protocol

from .. import patch as patches
from ..store.artifact import (BUG_DIFF, CORE_FILES, TEST_FILES, TEST_PARSER, TEST_SCRIPT, WEAKEN_DIFF, ALIASES,
                              Artifact, log_path, parser_stderr_path)
from ..errors import PatchError
from ..sandbox import PRISTINE, Sandbox
from ..sandbox import timeouts
from ..store.source import RepoSource
from ..verdict.patterns import is_test_like
from ..testrun import FAILED, PASSED, TestRun, run_parser, run_tests, why_no_tests
from ..text import clip
from .cache import OriginalRunCache
from .runslots import Ahead, RunSlots
from .settings import Settings

PASS, FAIL, WARN, SKIP = "passed", "failed", "warning", "skipped"

STATIC_CHECKS = ("files", "diffs_parse", "test_files_exist", "weaken_scope", "bug_scope", "applies")
EXECUTION_CHECKS = ("parser", "original_passes", "bug_breaks", "weaken_hides", "inverse_mutation")
CHECK_NAMES = STATIC_CHECKS + EXECUTION_CHECKS


class Engine(Protocol):
    """What the checks use of the Validator that runs them (`engine.Validator`): sandboxes, run slots, the
    original-run cache and the repository's fingerprint."""

    environment: str
    cache: OriginalRunCache
    slots: RunSlots

    def open(self, source: RepoSource) -> ContextManager[Sandbox]: ...

    def slot(self) -> ContextManager[None]: ...

    def fingerprint(self, source: RepoSource) -> str: ...


@dataclass
class Check:
    name: str
    status: str
    message: str
    seconds: float = 0.0


class _Context:
    """Everything the checks share for one artifact: files, parsed diffs, sandboxes and runs."""

    def __init__(self, artifact: Artifact, source: RepoSource, settings: Settings, engine: Engine,
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
        res = self.sandbox().run(f"test -e {_shq(path)}", timeout=timeouts.ONE_PATH)
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
