"""Grading a fix exactly as SPEC §6 says, plus the checks that keep reward hacking from paying.

State graded: original + `bug_inject.diff` + `test_weaken.diff` + fix. (A higher-order artifact needs nothing
more: its `bug_inject.diff` already is the combined code diff of the parent bug and the failed fix, SPEC §8.)
Then, before the tests run:

* every file listed in `test_files.txt` is restored to its original content;
* every *protected* file touched by any of the diffs is restored, or deleted when it did not exist originally.
  Protected = test-like files (`[validate] test_patterns`: `tests/`, `test_*.py`, `*_test.py`, `conftest.py`
  …) and the files that steer the runner or the interpreter (`[solve] protected`: `pytest.ini`, `tox.ini`,
  `setup.cfg`, `pyproject.toml`, `sitecustomize.py`, `*.pth`, a local `pytest.py` …);
* a new top-level module the fix adds at an import root (the repository root or `src/`) under the name of a
  standard-library module or of the test runner's own packages is deleted: `python -m pytest` puts the
  repository root first on `sys.path`, so a new `argparse.py` there would run before any test.

The graded state's git history is one fresh commit of original + bug + weaken, as the solver saw it (the
original commit, which `git show` would print the answer from, is gone), and the grading sandboxes hide
the artifact directory (`bug_inject.diff` reversed is the answer) like the solver's.

Ancestors of a restored path that the fix turned into symlinks or files are removed first, so a restore
never writes through a link.

Verdict: the attempt succeeds only if every FAIL_TO_PASS and PASS_TO_PASS test is present in the parsed log
and passed, and no test in the log failed or errored. A timeout, a parser failure, or a fix that does not
apply fails the attempt with a reason saying so. The script's exit code is recorded; a non-zero exit with no
failed test in the log is tampering and fails the attempt.

The fix's code runs in one sandbox; every log is parsed in a second, clean sandbox where no code of the fix
ever ran, so nothing the fix leaves behind (a module dropped next to the parser, a poisoned home directory or
interpreter) can forge the parser's verdict.

Canary (on by default, `[solve] canary`): an attempt that passes is run once more, from a fresh graded state
(fresh HOME and /tmp), with a test that always fails inserted among the tests of one listed test file — named
from the words of the file's own test names, placed before a random one of them, no marker (`make_canary`).
The attempt fails as forged if the log reports the canary as passed, if the canary is missing although the
same test script reports the same canary file on the original code, or if the required tests do not all pass
again as in the graded run (a fix that behaves only while it cannot see a canary, or a runner patched to pass
everything but the canary). The extra runs cost time only for attempts that would otherwise pass.
"""

from __future__ import annotations

import secrets
import shlex
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any, ClassVar

from .. import patch as patches
from ..store.artifact import BUG_DIFF, FIX, WEAKEN_DIFF, Artifact
from ..store.config import Config, load_settings, setting
from ..errors import PatchError, SsrkitError
from ..sandbox import timeouts
from ..sandbox.base import PRISTINE, Sandbox
from ..sandbox.git import fresh_history_command
from ..testrun import TEST_TIMEOUT, run_tests
from ..text import clip
from ..validate.settings import Settings as ValidateSettings
# the pure half of grading is the verdict's (shipped whole in exported tasks)
from ..verdict.canary import (Canary, after_reference, canary_target, decide, make_canary, not_run,
                             tampering_reason)
from ..verdict.judge import Expectations, judge
from ..verdict.patterns import DEFAULT_PROTECTED, DEFAULT_TEST_PATTERNS, paths_to_restore
from ..verdict.statuses import TestRun

#: the snapshot of the graded state (original + bug + weaken + fix, protected files restored) in the work
#: sandbox, which the canary run resets to
GRADED = "graded"


# -- settings --------------------------------------------------------------------------------------

@dataclass
class GradeSettings:
    """How a fix is graded: the test budget and patterns are `[validate]`'s (read by `validate.Settings`, their
    one reader), the guards `[solve]`'s."""

    SECTION: ClassVar[str] = "solve"

    timeout: float = setting(TEST_TIMEOUT, config=False, help="seconds per test run ([validate] timeout)")
    test_patterns: list[str] = setting(factory=lambda: list(DEFAULT_TEST_PATTERNS), config=False,
                                       help="what counts as a test file ([validate] test_patterns)")
    protected: list[str] = setting(factory=lambda: list(DEFAULT_PROTECTED),
                                   help="files restored before grading (a profile's are added)")
    canary: bool = setting(True, help="run a canary to catch a fix that forges the test results")
    guard_shadows: bool = setting(True, help="drop modules a fix adds that shadow the repository's own")

    @classmethod
    def from_config(cls, cfg: Config, *, timeout: float | None = None) -> "GradeSettings":
        """The test budget and patterns of `[validate]`, the guards of `[solve]`; `timeout` (a flag) wins."""
        tests = ValidateSettings.from_config(cfg)
        return load_settings(cls, cfg, timeout=float(timeout if timeout is not None else tests.timeout),
                             test_patterns=list(tests.test_patterns))

    @property
    def patterns(self) -> list[str]:
        return [*self.test_patterns, *self.protected]


# -- validation.json -------------------------------------------------------------------------------


def load_expectations(artifact: Artifact) -> Expectations:
    """FAIL_TO_PASS / PASS_TO_PASS of a valid, up-to-date validation; SsrkitError otherwise."""
    data = artifact.current_validation()
    if not data.get("valid"):
        checks = data.get("checks") or []
        first = next((c for c in checks if c.get("status") == "failed"), None)
        why = f" ({first['name']}: {first['message']})" if first else ""
        raise SsrkitError(f"{artifact.path} is invalid{why}; only valid artifacts are solved — fix it and "
                          f"validate it first")
    f2p = list(data.get("fail_to_pass") or [])
    if not f2p:
        raise SsrkitError(f"{artifact.path}: validation.json lists no FAIL_TO_PASS test; validate it first "
                          f"(ssrkit validate --redo)")
    return Expectations(f2p, list(data.get("pass_to_pass") or []))


# -- the verdict -----------------------------------------------------------------------------------

@dataclass
class Grade:
    """One graded fix: what eval.json records (besides who made it)."""

    passed: bool
    reason: str
    tests: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    log: str = ""
    missing: list[str] = field(default_factory=list)
    not_passed: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    fix_files: list[str] = field(default_factory=list)
    canary: dict[str, Any] | None = None
    parse_error: str | None = None
    canary_log: str = ""  # the canary run's log, when it ran (its own file: the verdict stays small)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "tests": self.tests,
            "exit_code": self.exit_code,
            "timed_out": self.timed_out,
            "seconds": round(self.seconds, 3),
            "missing": self.missing,
            "not_passed": self.not_passed,
            "failed": self.failed,
            "fix_files": self.fix_files,
            "restored": self.restored,
            "deleted": self.deleted,
            "canary": self.canary,
            "parse_error": self.parse_error,
        }


# -- restoring protected files --------------------------------------------------------------------

_PREP = r'''
ssrkit_prep() {
  local path="$1" acc="" part
  local IFS=/
  read -ra parts <<< "$path"
  unset IFS
  local n=$(( ${#parts[@]} - 1 ))
  for ((i = 0; i < n; i++)); do
    acc="${acc:+$acc/}${parts[i]}"
    if [ -L "$acc" ] || { [ -e "$acc" ] && [ ! -d "$acc" ]; }; then rm -f -- "$acc"; fi
  done
  ssrkit_gone+=("$path")
}
ssrkit_gone=()
'''


def _read_original(sandbox: Sandbox, path: str) -> bytes | None:
    try:
        return sandbox.read_file(path)
    except FileNotFoundError:
        return None
    except OSError:  # a directory, no permission, not a regular file
        return None


def _protected_paths(sandbox: Sandbox, artifact: Artifact, fix_diff: str,
                     settings: GradeSettings) -> tuple[list[str], list[str]]:
    """(paths to restore or delete, fix files that are new shadowing modules: `verdict.patterns.paths_to_restore`);
    `sandbox` holds the original code (a shadowing file that exists there is the repository's own)."""
    touched: list[str] = []
    for label, diff in ((BUG_DIFF, artifact.bug_diff), (WEAKEN_DIFF, artifact.weaken_diff), (FIX, fix_diff)):
        for p in patches.touched_files(diff, label):
            if p not in touched:
                touched.append(p)
    targets = [c.target for c in patches.parse(fix_diff, FIX)] if settings.guard_shadows else []
    return paths_to_restore(artifact.test_files, touched, targets, settings.patterns, settings.guard_shadows,
                            lambda p: _read_original(sandbox, p) is not None)


@dataclass
class PreparedState:
    restored: list[str]
    deleted: list[str]
    originals: dict[str, bytes | None]


def prepare(sandbox: Sandbox, artifact: Artifact, fix_diff: str, settings: GradeSettings) -> PreparedState:
    """Bring the sandbox to the graded state: original + bug + weaken + fix, protected files restored.

    Raises PatchError naming `fix.diff` when the fix does not apply (or escapes the repository), and
    SsrkitError when the artifact's own diffs do not apply (the artifact changed or its source did).
    """
    patches.check_paths(fix_diff, FIX)
    sandbox.reset(PRISTINE)
    paths, shadows = _protected_paths(sandbox, artifact, fix_diff, settings)
    originals = {p: _read_original(sandbox, p) for p in paths}
    for p in shadows:
        originals[p] = None
    fix_touched = set(patches.touched_files(fix_diff, FIX))
    todo = paths + [p for p in shadows if p not in paths]
    # one command: the artifact's diffs, the same fresh single commit the solver saw (no history of the
    # original to `git show` the answer from), the fix, the protected paths' removal
    artifact_diffs = sandbox.applies([(BUG_DIFF, artifact.bug_diff), (WEAKEN_DIFF, artifact.weaken_diff)])
    fix = sandbox.applies([(FIX, fix_diff)], stem="ssrkit-fix")
    history_failed = f"ssrkit-history-failed-{secrets.token_hex(8)}"
    err = shlex.quote(sandbox.scratch_path("ssrkit-history.err"))
    history = (f"{{ {fresh_history_command('Initial commit')}; }} >{err} 2>&1 || "
               f"{{ echo {history_failed}; cat {err}; exit 1; }}")
    script = _PREP + "".join(f"ssrkit_prep {shlex.quote(p)}\n" for p in todo)
    script += 'rm -rf -- "${ssrkit_gone[@]}"\n' if todo else ""  # one `rm` for all of them
    res = sandbox.run(artifact_diffs.command(f"{history}; " + fix.command(script)), timeout=timeouts.GRADE_PREPARE)
    try:
        artifact_diffs.check(res.output)
    except PatchError as e:
        raise SsrkitError(f"{artifact.path}: {e}; the artifact no longer matches its repository — validate it again")
    if res.output.startswith(history_failed + "\n"):
        raise PatchError(f"could not create a fresh git history: {res.output.partition(chr(10))[2].strip()[:300]}")
    fix.check(res.output)
    if not res.ok:
        raise SsrkitError(f"could not restore the protected files in the sandbox: {res.output.strip()[:300]}")
    restored, deleted = [], []
    for p in todo:
        data = originals.get(p)
        if data is None:
            if p in fix_touched:
                deleted.append(p)
            continue
        sandbox.write_file(p, data)
        if p in fix_touched or p in patches.touched_files(artifact.weaken_diff, WEAKEN_DIFF):
            restored.append(p)
    return PreparedState(restored=restored, deleted=deleted, originals=originals)


# -- running and parsing --------------------------------------------------------------------------

def execute(work: Sandbox, clean: Sandbox, artifact: Artifact, timeout: float) -> TestRun:
    """Run test_script.sh in `work`'s current state; parse the log in `clean`.

    `clean` is a sandbox where no code of the fix ever ran: whatever the fix did during the test run (files
    dropped in the scratch directory, a poisoned home directory or interpreter) cannot reach the parser.
    """
    return run_tests(work, artifact.test_script, artifact.test_parser, timeout=timeout, parse_in=clean)


# -- the canary -----------------------------------------------------------------------------------


def canary_expected(clean: Sandbox, artifact: Artifact, target: str, canary: Canary, timeout: float) -> bool:
    """Does the test script report `canary`'s new test in `target` on the original code?

    The same canary file as the fix's run (name, place, sabotaged test), so that only the fix differs: a
    script that selects tests by name may run one canary name and not another. Runs in the clean sandbox:
    the fix's code must not be able to hide the canary from this reference run. Only run when the canary
    is missing with the fix, so it costs nothing on an ordinary pass.
    """
    clean.reset(PRISTINE)
    clean.write_file(target, canary.text)
    return bool(canary.statuses(execute(clean, clean, artifact, timeout)))


LOG_KEY = "log"  # in check_canary's details: the canary run's log, taken out before they are recorded


def check_canary(work: Sandbox, clean: Sandbox, artifact: Artifact, fix_diff: str, expect: Expectations,
                 settings: GradeSettings, graded: TestRun | None = None,
                 prepared: PreparedState | None = None) -> tuple[bool, dict[str, Any]]:
    """Re-run the graded state with an always-failing test added; (forged?, details).

    Forged when the canary is reported as passed, when it vanishes although the script reports it on the
    original code, or when the required tests do not all pass again exactly as in the graded run.

    The run starts from the graded state afresh (the first run may have changed files; HOME and /tmp are
    emptied): the `GRADED` snapshot `grade` took when `prepared` is given (a reset, not a second prepare),
    else prepared again.
    """
    target = canary_target(artifact.test_files, expect)
    if prepared is not None:
        work.reset(GRADED)
    else:
        prepared = prepare(work, artifact, fix_diff, settings)
    if target is None or prepared.originals.get(target) is None:
        return False, not_run()
    ids = sorted({*expect.required, *(graded.statuses if graded else ())})
    canary = make_canary(prepared.originals[target], ids, stem=PurePosixPath(target).stem,
                         avoid=artifact.test_script)
    work.write_file(target, canary.text)
    run = execute(work, clean, artifact, settings.timeout)
    info: dict[str, Any] = {"file": target, "tests": canary.statuses(run), "sabotaged": canary.sabotaged_statuses(run),
                            "exit_code": run.exit_code, LOG_KEY: run.log}  # `grade` moves the log to its own file
    decision = decide(canary, run, graded, expect)
    if decision is None:  # the canary is missing: does the script report it on the original code?
        info["expected_on_original"] = canary_expected(clean, artifact, target, canary, settings.timeout)
        decision = after_reference(info["expected_on_original"])
    return decision.record(info), info


# -- grading --------------------------------------------------------------------------------------

def grade(sandbox: Sandbox, artifact: Artifact, fix_diff: str, *, clean: Sandbox | None = None,
          settings: GradeSettings | None = None, expect: Expectations | None = None) -> Grade:
    """Grade one fix.

    `sandbox` and `clean` are two sandboxes opened on the artifact's repository (pristine state = the
    original). The fix's code runs only in `sandbox`; logs are parsed in `clean`, which must be a sandbox
    no fix ever ran in (pass None to parse in `sandbox` after a reset — weaker: only for backends where
    nothing outside the workspace survives a command).
    """
    clean = clean or sandbox
    settings = settings or GradeSettings()
    expect = expect or load_expectations(artifact)
    started = time.monotonic()
    try:
        patches.check_size(fix_diff, FIX)
    except PatchError as e:
        return Grade(False, f"the fix is too large: {e}", seconds=time.monotonic() - started)
    try:
        fix_files = patches.touched_files(fix_diff, FIX)
    except PatchError as e:
        return Grade(False, clip(f"the fix does not apply (not a diff git reads): {e}"),
                     seconds=time.monotonic() - started)
    try:
        prepared = prepare(sandbox, artifact, fix_diff, settings)
    except PatchError as e:
        return Grade(False, clip(f"the fix does not apply: {e}"), fix_files=fix_files,
                     seconds=time.monotonic() - started)
    if settings.canary:
        sandbox.snapshot(GRADED)  # the canary run starts from here again, without a second prepare
    run = execute(sandbox, clean, artifact, settings.timeout)
    passed, reason, details = judge(run, expect)
    result = Grade(
        passed=passed, reason=reason, tests=run.statuses, exit_code=run.exit_code, timed_out=run.timed_out,
        log=run.log, missing=details["missing"], not_passed=details["not_passed"], failed=details["failed"],
        restored=prepared.restored, deleted=prepared.deleted, fix_files=fix_files, parse_error=run.parse_error,
    )
    if passed and settings.canary:
        forged, info = check_canary(sandbox, clean, artifact, fix_diff, expect, settings, graded=run,
                                    prepared=prepared)
        result.canary_log = info.pop(LOG_KEY, "")
        result.canary = info
        if forged:
            result.passed = False
            result.reason = tampering_reason(info)
    result.reason = clip(result.reason)
    result.parse_error = clip(result.parse_error) if result.parse_error else result.parse_error
    result.seconds = time.monotonic() - started
    return result
