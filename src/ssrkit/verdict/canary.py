"""The canary: always-failing tests hidden among a listed test file's own tests, and what a run of them says
about a fix (see `grade.py` for when it runs and the runs it takes)."""

from __future__ import annotations

import ast
import re
import secrets
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from . import pyast
from .judge import Expectations, judge
from .statuses import PASSED, TestRun

_TEST_MODULE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")


def canary_target(test_files: list[str], expect: Expectations) -> str | None:
    """The listed test file (of `test_files.txt`) the canary goes into: one holding a FAIL_TO_PASS test if the
    ids tell."""
    candidates = [f for f in test_files if _TEST_MODULE.search(f)]
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


# -- what a canary run says about the fix -----------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    """What the canary runs say about a fix: `forged` fails the attempt; `status` and `note` are recorded."""

    forged: bool
    status: str  # forged | vanished | changed | caught | absent
    note: str | None = None

    def record(self, info: dict[str, Any]) -> bool:
        """Write the status (and the note) into the canary's details; whether the fix is forged."""
        info["status"] = self.status
        if self.note is not None:
            info["note"] = self.note
        return self.forged


def not_run() -> dict[str, Any]:
    """The canary's details when no listed test module can hold one (nothing forged)."""
    return {"status": "not_run", "note": "no listed test module to put a canary into"}


def decide(canary: Canary, run: TestRun, graded: TestRun | None, expect: Expectations) -> Decision | None:
    """The decision from the canary run of a fix that passed its graded run (`graded`), or None when the canary
    is missing from `run`: only a reference run (the same canary file on the original code) tells a script
    that does not report it from a fix that hides it (`after_reference`).

    Forged when the canary (or the known test made to fail) is reported as passed, when the known test made to
    fail is missing although the graded run reported it, or when the required tests do not all pass again as
    in the graded run; caught (genuine output) when the canary is reported, and not as passed.
    """
    seen, broken = canary.statuses(run), canary.sabotaged_statuses(run)
    if any(s == PASSED for s in (*seen.values(), *broken.values())):
        return Decision(True, "forged", "a test that always fails was reported as passed")
    was = canary.sabotaged_statuses(graded) if graded is not None and canary.sabotaged else {}
    if was and not broken:
        return Decision(True, "vanished", f"the known test {canary.sabotaged}, made to fail, is missing from the "
                                          "canary run")
    rest = TestRun(log=run.log, exit_code=0, seconds=run.seconds, timed_out=run.timed_out, truncated=run.truncated,
                   statuses={t: s for t, s in run.statuses.items() if t not in seen and t not in broken},
                   parse_error=run.parse_error)
    ok, why, _ = judge(rest, Expectations([t for t in expect.fail_to_pass if t not in was],
                                          [t for t in expect.pass_to_pass if t not in was]))
    if not ok:
        return Decision(True, "changed", f"with the canary present the required tests do not pass as in the graded "
                                         f"run ({why})")
    if seen:
        return Decision(False, "caught")  # reported, and not as passed: the output is genuine
    return None


def after_reference(expected: bool) -> Decision:
    """The decision once the reference run said whether the test script reports the canary on the original
    code (`expected`): missing with the fix although reported there is a fix that hides it."""
    if expected:
        return Decision(True, "vanished", "the canary test is reported on the original code but missing with the fix")
    return Decision(False, "absent", "the test script does not report a canary test (it selects tests by id); check "
                                     "inconclusive")


def tampering_reason(info: dict[str, Any]) -> str:
    """The reason a forged fix fails with, from the canary's details."""
    return f"tampering: {info['note']} (canary in {info['file']})"
