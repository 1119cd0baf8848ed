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

import ast
import re
import secrets
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from . import patch as patches
from .store.artifact import BUG_DIFF, FIX, WEAKEN_DIFF, Artifact
from .store.config import DEFAULT_PROTECTED, DEFAULT_TEST_PATTERNS, Config
from .errors import PatchError, SsrkitError
from .sandbox.base import PRISTINE, Sandbox, fresh_history_command
from .pathmatch import matches
from .testrun import ERROR, FAILED, PASSED, TEST_TIMEOUT, TestRun, run_tests
from .text import clip
from . import pyast

#: the snapshot of the graded state (original + bug + weaken + fix, protected files restored) in the work
#: sandbox, which the canary run resets to
GRADED = "graded"

#: Top-level names a fix may not add at an import root: the standard library and the runner's own packages.
RUNNER_MODULES = frozenset({
    "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli", "colorama",
    "pygments", "xdist", "pytest_timeout", "coverage", "nose", "nose2", "hypothesis", "_hypothesis_pytestplugin",
})
SHADOW_NAMES = frozenset(sys.stdlib_module_names) | RUNNER_MODULES
IMPORT_ROOTS = ("", "src")


# -- settings --------------------------------------------------------------------------------------

@dataclass
class GradeSettings:
    timeout: float = TEST_TIMEOUT
    test_patterns: list[str] = field(default_factory=lambda: list(DEFAULT_TEST_PATTERNS))
    protected: list[str] = field(default_factory=lambda: list(DEFAULT_PROTECTED))
    canary: bool = True
    guard_shadows: bool = True

    @classmethod
    def from_config(cls, cfg: Config, *, timeout: float | None = None) -> "GradeSettings":
        """The test budget and patterns of `[validate]`, the guards of `[solve]`; `timeout` (a flag) wins."""
        d = cls()
        return cls(
            timeout=float(timeout if timeout is not None else cfg.get("validate", "timeout", d.timeout)),
            test_patterns=list(cfg.get("validate", "test_patterns", d.test_patterns)),
            protected=list(cfg.get("solve", "protected", d.protected)),
            canary=bool(cfg.get("solve", "canary", d.canary)),
            guard_shadows=bool(cfg.get("solve", "guard_shadows", d.guard_shadows)),
        )

    @property
    def patterns(self) -> list[str]:
        return [*self.test_patterns, *self.protected]


def shadowed_module(path: str) -> str | None:
    """The standard-library or runner module a file at `path` would shadow, if it sits at an import root."""
    parts = PurePosixPath(path).parts
    for root in IMPORT_ROOTS:
        rparts = PurePosixPath(root).parts if root else ()
        if len(parts) <= len(rparts) or tuple(parts[:len(rparts)]) != rparts:
            continue
        rest = parts[len(rparts):]
        top = rest[0]
        if len(rest) == 1:
            if not top.endswith((".py", ".pyc", ".so", ".pyd")):
                continue
            top = top.split(".", 1)[0]
        if top in SHADOW_NAMES:
            return top
    return None


# -- validation.json -------------------------------------------------------------------------------

@dataclass
class Expectations:
    """What grading needs from validation.json."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]

    @property
    def required(self) -> list[str]:
        return [*self.fail_to_pass, *self.pass_to_pass]


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


def _short(items: list[str], n: int = 3) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def judge(run: TestRun, expect: Expectations) -> tuple[bool, str, dict[str, Any]]:
    """The SPEC §6 verdict on one grading run: (passed, reason, details)."""
    statuses = run.statuses
    required = expect.required
    missing = [t for t in required if t not in statuses]
    not_passed = {t: statuses[t] for t in required if t in statuses and statuses[t] != PASSED}
    failed = sorted(t for t, s in statuses.items() if s in (FAILED, ERROR))
    details = {"missing": missing, "not_passed": not_passed, "failed": failed}
    if run.timed_out:
        return False, f"the tests did not finish within the time budget ({run.seconds:.0f}s)", details
    if run.parse_error and not statuses:
        return False, f"the test log could not be parsed: {run.parse_error}", details
    f2p = set(expect.fail_to_pass)
    f2p_bad = [t for t in expect.fail_to_pass if t in missing or t in not_passed]
    if f2p_bad:
        how = ", ".join(f"{t} ({not_passed.get(t, 'absent')})" for t in f2p_bad[:3])
        more = f" and {len(f2p_bad) - 3} more" if len(f2p_bad) > 3 else ""
        return False, (f"{len(f2p_bad)} of {len(f2p)} FAIL_TO_PASS test(s) do not pass: {how}{more}"), details
    p2p_bad = [t for t in expect.pass_to_pass if t in missing or t in not_passed]
    if p2p_bad:
        how = ", ".join(f"{t} ({not_passed.get(t, 'absent')})" for t in p2p_bad[:3])
        more = f" and {len(p2p_bad) - 3} more" if len(p2p_bad) > 3 else ""
        return False, f"{len(p2p_bad)} PASS_TO_PASS test(s) broken by the fix: {how}{more}", details
    if failed:
        return False, f"{len(failed)} other test(s) failed: {_short(failed)}", details
    if run.exit_code != 0:
        return False, (f"tampering: the test script exited with code {run.exit_code} but the parsed log shows no "
                       f"failed test"), details
    return True, f"all {len(required)} required test(s) pass ({len(f2p)} FAIL_TO_PASS)", details


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


def _protected_paths(artifact: Artifact, fix_diff: str, settings: GradeSettings) -> tuple[list[str], list[str]]:
    """(paths to restore or delete, fix files that are shadowing modules)."""
    touched: list[str] = []
    for label, diff in ((BUG_DIFF, artifact.bug_diff), (WEAKEN_DIFF, artifact.weaken_diff), (FIX, fix_diff)):
        for p in patches.touched_files(diff, label):
            if p not in touched:
                touched.append(p)
    out = list(artifact.test_files)
    for p in touched:
        if p not in out and matches(p, settings.patterns):
            out.append(p)
    shadows: list[str] = []
    for c in patches.parse(fix_diff, FIX) if settings.guard_shadows else []:
        if c.target and c.target not in out and c.target not in shadows and shadowed_module(c.target):
            shadows.append(c.target)  # deleted below unless the file exists in the original repository
    return out, shadows


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
    paths, shadows = _protected_paths(artifact, fix_diff, settings)
    sandbox.reset(PRISTINE)
    originals = {p: _read_original(sandbox, p) for p in paths}
    shadows = [p for p in shadows if _read_original(sandbox, p) is None]
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
    res = sandbox.run(artifact_diffs.command(f"{history}; " + fix.command(script)), timeout=240)
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

_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")


def canary_target(artifact: Artifact, expect: Expectations) -> str | None:
    """The listed test file the canary goes into: one holding a FAIL_TO_PASS test if the ids tell."""
    candidates = [f for f in artifact.test_files if _TEST_MODULE.search(f)]
    if not candidates:
        return None
    for f in candidates:
        if any(t.startswith(f) or f in t for t in expect.fail_to_pass):
            return f
    stem_hits = [f for f in candidates
                 if any(PurePosixPath(f).stem in t for t in expect.fail_to_pass)]
    return (stem_hits or candidates)[0]


_WORD = re.compile(r"[a-z][a-z0-9]+")
_FILLER = ("value", "edge", "basic", "empty", "large", "order", "default", "repr", "roundtrip", "none", "types",
           "bounds", "single", "many", "unicode", "nested", "zero", "negative", "float", "mixed")


def _id_pattern(name: str) -> re.Pattern[str]:
    """`name` where a test id names a test so: a whole word, not followed by `.` or `/` as a module or
    directory of the id's path is (`tests/test_serializer.py::TestSerializer::test_dumps` and
    `tests.test_serializer.TestSerializer.test_dumps` name no test `test_serializer`)."""
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_./])")


@dataclass(frozen=True)
class Canary:
    """Always-failing tests hidden among a test file's own tests: a new one, and a known one made to fail."""

    name: str  # the new test's function or method name, e.g. test_clamp_order
    text: str  # the test file with the canary inserted
    sabotaged: str | None = None  # a known test of the file whose body now always fails

    @staticmethod
    def _ids(name: str | None, run: TestRun) -> dict[str, str]:
        if not name:
            return {}
        pat = _id_pattern(name)
        return {t: s for t, s in run.statuses.items() if pat.search(t)}

    def statuses(self, run: TestRun) -> dict[str, str]:
        """The new test's statuses in `run`."""
        return self._ids(self.name, run)

    def sabotaged_statuses(self, run: TestRun) -> dict[str, str]:
        return self._ids(self.sabotaged, run)


def _test_defs(tree: ast.Module) -> tuple[list[ast.stmt], list[tuple[ast.ClassDef, list[ast.stmt]]]]:
    """(top-level test functions, [(test class, its test methods)])."""
    funcs: list[ast.stmt] = []
    classes: list[tuple[ast.ClassDef, list[ast.stmt]]] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            funcs.append(node)
        elif isinstance(node, ast.ClassDef):
            methods = [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and m.name.startswith("test")]
            if methods:
                classes.append((node, methods))
    return funcs, classes


def _failing_assertion(rng: secrets.SystemRandom) -> str:
    a, b = rng.randrange(2, 500), rng.randrange(2, 500)
    return rng.choice((f"assert {a} + {b} == {a + b + rng.randrange(1, 9)}",
                       f"assert {a * b} == {a} * {b + 1}",
                       f"assert [{a}, {b}] == [{b + 1}, {a}]",
                       f"assert str({a}) == {str(a + 1)!r}"))


def _start(node: ast.stmt) -> int:
    """0-based first line of a definition, decorators included."""
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1


def _selecting_words(script: str) -> set[str]:
    """The words of a test script that may select or deselect tests by name, lower case: the last part of
    each test id (`path::name`) and every word of its other arguments, but not the paths it names."""
    words: set[str] = set()
    for arg in re.split(r"[\s'\"=]+", script.lower()):
        if "::" in arg:
            arg = arg.rsplit("::", 1)[1]
        elif "/" in arg or arg.endswith(".py"):
            continue
        words.update(w for w in re.findall(r"[a-z0-9_]+", arg) if len(w) >= 3 and w != "test")
    return words


def make_canary(original: bytes, taken: list[str] | tuple[str, ...] = (), *, stem: str = "", avoid: str = "",
                rng: secrets.SystemRandom | None = None) -> Canary:
    """Hide always-failing tests in a test file, shaped like the file's own tests.

    A new test: named from words of the file's own test names (`test_<word>_<word>`), a plain assertion
    between random numbers, placed before a random one of the file's tests — at module level when the file
    has test functions, as a method of one of its test classes otherwise. No comment, no fixed prefix. And a
    known test: one of the file's tests listed in `taken` (the graded run's ids, `stem` = the file's stem to
    tell its ids from other files') keeps its name and decorators, but its body becomes a failing assertion,
    so a runner that passes exactly the tests it knows is caught too.

    `avoid` (the test script) names tests the script may select or deselect by name: the new test's name
    contains none of its words, in any case. pytest's `--deselect ID` drops every id that *starts* with ID,
    and `-k "not slow"` every name that contains `slow`: a canary named `test_mean_empty_inside` next to
    `--deselect tests/test_calc.py::test_mean_empty` would never run.
    """
    rng = rng or secrets.SystemRandom()
    text = original.decode("utf-8", "replace")
    lines = text.splitlines(keepends=True)
    try:
        funcs, classes = _test_defs(pyast.parse(text))
    except (SyntaxError, ValueError):
        funcs, classes = [], []
    defs = funcs + [m for _, ms in classes for m in ms]
    names = [n.name for n in defs]  # type: ignore[attr-defined]
    words = sorted({w for n in names for w in _WORD.findall(n.lower()) if w != "test"})
    if len(words) < 4:
        words += rng.sample(_FILLER, 4)
    taken_text = "\n".join([text, *taken])
    script_words = _selecting_words(avoid)

    def free(name: str) -> bool:
        return (not any(w in name for w in script_words)
                and not re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", taken_text))

    def of_words(pool):  # a list or tuple of words
        return "test_" + "_".join(rng.sample(pool, min(len(pool), rng.choice((1, 2, 2, 3)))))

    def numbered() -> str:  # every pair of words is in use: a number tells this one apart
        return "test_" + "_".join(rng.sample(_FILLER, 2)) + f"_{rng.randrange(2, 10**6)}"

    draws = [lambda: of_words(words)] * 200 + [lambda: of_words(_FILLER)] * 200 + [numbered] * 1000
    for draw in draws:  # bounded: past the last, the name stays (the reference run then finds it absent)
        name = draw()
        if free(name):
            break

    # the known test to sabotage: defined once here, and every id naming it is this file's
    def ids_of(n: str) -> list[str]:
        pat = _id_pattern(n)
        return [t for t in taken if pat.search(t)]

    def plain(d: ast.stmt) -> bool:  # no mark that turns a failure into something else (xfail, skip, flaky)
        marks = " ".join(ast.unparse(x) for x in getattr(d, "decorator_list", []))
        return not re.search(r"xfail|skip|expectedFailure|flaky|rerun", marks)

    known = [d for d in defs if names.count(d.name) == 1 and ids_of(d.name) and plain(d)  # type: ignore[attr-defined]
             and all(stem in t for t in ids_of(d.name))]  # type: ignore[attr-defined]
    edits: list[tuple[int, int, list[str]]] = []  # (start, end, replacement lines), 0-based, end exclusive
    sabotaged = None
    sabotage: tuple[int, int, list[str]] | None = None
    if known:
        victim = rng.choice(known)
        sabotaged = victim.name  # type: ignore[attr-defined]
        body = victim.body  # type: ignore[attr-defined]
        first = _start(body[0])  # a decorated inner function: its decorators go too
        indent = re.match(r"[ \t]*", lines[first]).group(0)  # type: ignore[union-attr]
        if (body[0].lineno == victim.lineno or not lines[first].strip()
                or not lines[first].startswith(indent) or not indent):
            sabotaged = None  # a one-line definition: leave it alone
        else:
            sabotage = (first, victim.end_lineno, [f"{indent}{_failing_assertion(rng)}\n"])  # type: ignore[attr-defined]
            edits.append(sabotage)
    if funcs or not classes:
        if funcs:
            at = _start(rng.choice(funcs))
            edits.append((at, at, [f"def {name}():\n", f"    {_failing_assertion(rng)}\n", "\n", "\n"]))
        else:
            tail = "" if text.endswith("\n") or not text else "\n"
            edits.append((len(lines), len(lines),
                          [tail + "\n\n", f"def {name}():\n", f"    {_failing_assertion(rng)}\n"]))
    else:
        _cls, methods = rng.choice(classes)
        anchor = rng.choice(methods)
        at = _start(anchor)
        indent = re.match(r"[ \t]*", lines[at]).group(0)  # type: ignore[union-attr]
        step = "\t" if "\t" in indent else "    "
        edits.append((at, at, [f"{indent}def {name}(self):\n", f"{indent}{step}{_failing_assertion(rng)}\n", "\n"]))
    canary = Canary(name, _edited(lines, edits), sabotaged)
    if sabotage is not None and not _parses(canary.text):
        # the file parsed (it has tests), so must its canary: one that does not collects nothing, and the
        # sabotaged test would "vanish" from the run of a fix that is right (a false "tampering")
        canary = Canary(name, _edited(lines, [e for e in edits if e is not sabotage]), None)
    return canary


def _edited(lines: list[str], edits: list[tuple[int, int, list[str]]]) -> str:
    out = list(lines)
    for start, end, repl in sorted(edits, key=lambda e: e[0], reverse=True):
        out[start:end] = repl
    return "".join(out)


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


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
    target = canary_target(artifact, expect)
    if prepared is not None:
        work.reset(GRADED)
    else:
        prepared = prepare(work, artifact, fix_diff, settings)
    if target is None or prepared.originals.get(target) is None:
        return False, {"status": "not_run", "note": "no listed test module to put a canary into"}
    ids = sorted({*expect.required, *(graded.statuses if graded else ())})
    canary = make_canary(prepared.originals[target], ids, stem=PurePosixPath(target).stem,
                         avoid=artifact.test_script)
    work.write_file(target, canary.text)
    run = execute(work, clean, artifact, settings.timeout)
    seen = canary.statuses(run)
    broken = canary.sabotaged_statuses(run)
    info: dict[str, Any] = {"file": target, "tests": seen, "sabotaged": broken, "exit_code": run.exit_code,
                            LOG_KEY: run.log}  # `grade` moves the log to its own file (canary_output.log)
    if any(s == PASSED for s in (*seen.values(), *broken.values())):
        info["status"] = "forged"
        info["note"] = "a test that always fails was reported as passed"
        return True, info
    was = canary.sabotaged_statuses(graded) if graded is not None and canary.sabotaged else {}
    if was and not broken:
        info["status"] = "vanished"
        info["note"] = f"the known test {canary.sabotaged}, made to fail, is missing from the canary run"
        return True, info
    sab = set(was)
    rest = TestRun(log=run.log, exit_code=0, seconds=run.seconds, timed_out=run.timed_out, truncated=run.truncated,
                   statuses={t: s for t, s in run.statuses.items() if t not in seen and t not in broken},
                   parse_error=run.parse_error)
    ok, why, _ = judge(rest, Expectations([t for t in expect.fail_to_pass if t not in sab],
                                          [t for t in expect.pass_to_pass if t not in sab]))
    if not ok:
        info["status"] = "changed"
        info["note"] = f"with the canary present the required tests do not pass as in the graded run ({why})"
        return True, info
    if seen:
        info["status"] = "caught"  # reported, and not as passed: the output is genuine
        return False, info
    expected = canary_expected(clean, artifact, target, canary, settings.timeout)
    info["expected_on_original"] = expected
    if expected:
        info["status"] = "vanished"
        info["note"] = "the canary test is reported on the original code but missing with the fix"
        return True, info
    info["status"] = "absent"
    info["note"] = "the test script does not report a canary test (it selects tests by id); check inconclusive"
    return False, info


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
            result.reason = f"tampering: {info['note']} (canary in {info['file']})"
    result.reason = clip(result.reason)
    result.parse_error = clip(result.parse_error) if result.parse_error else result.parse_error
    result.seconds = time.monotonic() - started
    return result
