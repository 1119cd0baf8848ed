"""The `repair` baseline solver: search-based program repair with no model (SPEC §6).

Given the solver's view of an artifact — a sandbox holding the buggy code and weakened tests under a fresh
git history — and the task (the reversed `test_weaken.diff`), `find_repair`:

1. applies the tests diff and runs `test_script.sh` once under per-test coverage (`mutation.coverage`);
2. ranks the code lines by Ochiai suspiciousness over the failing and passing tests' coverage
   (ef / sqrt(failing · (ef + ep)); ties broken by the seed);
3. tries inverse mutations at the most suspicious lines — the injector's own operators: comparison,
   boolean and arithmetic swaps, off-by-one, `not` removal and insertion, boolean constants — re-running
   the tests after each, and keeps the first candidate with which every test of the run passes;
4. stops after `budget_runs` test runs (the coverage run included); a candidate run that takes more than
   5 × the baseline run (at least 10 s, at most `timeout`) counts as failed.

When no candidate makes every test pass, the result still names the best *partial* fix, if any: the
candidate that made the most failing tests pass without breaking a passing one. `RepairSolver(partial=True)`
submits it — a failed attempt that changed code, the natural mistake higher-order bugs are made from.

Bugs it fixes are trivially easy: a useful filter for a task pool. The returned fix diff is code only
(computed against the state before the tests diff); the sandbox is left as it was given.
"""

from __future__ import annotations

import math
import random
import shlex
import time
from dataclasses import dataclass

from .. import patch as patches
from ..errors import PatchError, SsrkitError
from ..mutation.operators import REPAIR, REPAIR_OPERATORS, functions, mutations
from ..mutation.source_text import SourceText
from ..mutation.coverage import run_with_coverage
from ..sandbox import timeouts
from ..sandbox.base import Sandbox
from ..testrun import FAILED, PASSED, SKIPPED, ERROR, run_parser, run_tests
from ..verdict.patterns import DEFAULT_TEST_PATTERNS, is_test_like

#: test runs one repair attempt may spend, the coverage run included (`--budget-runs`)
DEFAULT_BUDGET_RUNS = 40

MIN_CANDIDATE_TIMEOUT = 10.0  # seconds
CANDIDATE_TIMEOUT_FACTOR = 5.0  # × the baseline (coverage) run's duration
_GIVEN = "repair-given"
_TESTS = "repair-tests"


@dataclass
class RepairResult:
    fix_diff: str | None  # None when no candidate made every test pass
    runs: int  # test runs used (the coverage run included)
    candidates: int  # candidate patches tried
    seconds: float
    note: str
    partial: str | None = None  # without a fix: the candidate that fixed the most failing tests, breaking none
    partial_note: str = ""


def find_repair(sandbox: Sandbox, *, tests_diff: str, test_script: str, test_parser: str,
                timeout: float, budget_runs: int = DEFAULT_BUDGET_RUNS, seed: int = 0, max_lines: int = 25,
                test_patterns: list[str] | None = None) -> RepairResult:
    """Search for a code patch that makes the tests of `tests_diff` pass (see the module docstring)."""
    started = time.monotonic()
    patterns = list(test_patterns or DEFAULT_TEST_PATTERNS)
    runs = 0
    tried = 0

    best: dict = {}  # the best partial fix so far: fixed (count), path, text, note

    def result(fix: str | None, note: str) -> RepairResult:
        partial = partial_note = None
        if fix is None and best:
            sandbox.reset(_GIVEN)
            sandbox.write_file(best["path"], best["text"])
            partial, partial_note = sandbox.diff(), best["note"]
        return RepairResult(fix, runs, tried, time.monotonic() - started, note, partial, partial_note or "")

    sandbox.snapshot(_GIVEN)
    try:
        try:
            sandbox.apply_patch(tests_diff, label="the tests diff")
        except PatchError as e:
            return result(None, f"the tests diff does not apply: {e}")
        sandbox.snapshot(_TESTS)
        protected = set(patches.touched_files(tests_diff)) if tests_diff.strip() else set()

        # 1. one run under per-test coverage
        if budget_runs < 1:
            return result(None, "no budget")
        script = sandbox.scratch_path("repair_test_script.sh")
        sandbox.write_file(script, test_script, mode=0o755)
        runs += 1
        try:
            res, tm = run_with_coverage(sandbox, f"bash {shlex.quote(script)}", python=_python(sandbox),
                                        timeout=timeout, name="repair")
        except SsrkitError as e:
            return result(None, f"no coverage: {e}")
        if res.timed_out:
            return result(None, f"the tests timed out after {timeout:g}s")
        statuses, error, _ = run_parser(sandbox, test_parser, res.output)
        if statuses is None:
            return result(None, f"the test log could not be parsed: {error}")
        failing = sorted(t for t, s in statuses.items() if s in (FAILED, ERROR))
        if not failing:
            return result(None, "nothing to repair: every test passes")
        baseline = {t for t, s in statuses.items() if s == PASSED}
        # a candidate may loop forever: it gets a few times the baseline run's duration
        candidate_timeout = min(timeout, max(MIN_CANDIDATE_TIMEOUT, CANDIDATE_TIMEOUT_FACTOR * res.seconds))

        # 2. fault localization
        ranked = _ochiai(tm, set(failing), patterns, protected, random.Random(seed))
        if not ranked:
            return result(None, "the failing tests cover no code line (import-time failure?)")

        # 3. inverse mutations at the most suspicious lines
        seen: set[tuple[str, str]] = set()
        texts: dict[str, SourceText | None] = {}
        for path, line, _score in ranked[:max_lines]:
            if path not in texts:
                try:
                    texts[path] = SourceText(sandbox.read_file(path).decode("utf-8"), path)
                except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                    texts[path] = None
            st = texts[path]
            if st is None:
                continue
            for m in _candidates(st, line):
                new = m.apply(st.text)
                if (path, new) in seen:
                    continue
                seen.add((path, new))
                if runs >= budget_runs:
                    return result(None, f"gave up: budget of {budget_runs} test runs spent "
                                        f"({tried} candidate(s) at {len({(p, l) for p, l, _ in ranked[:max_lines]})} line(s))")
                tried += 1
                runs += 1
                sandbox.reset(_TESTS)
                sandbox.write_file(path, new)
                run = run_tests(sandbox, test_script, test_parser, timeout=candidate_timeout)
                if _all_pass(run.statuses, baseline, failing) and not run.timed_out:
                    sandbox.reset(_GIVEN)
                    sandbox.write_file(path, new)
                    fix = sandbox.diff()
                    return result(fix, f"{m.operator} at {path}:{m.line}: {m.detail}")
                fixed = _partial(run.statuses, baseline, failing) if not run.timed_out else 0
                if fixed > best.get("fixed", 0):
                    best.update(fixed=fixed, path=path, text=new,
                                note=f"{m.operator} at {path}:{m.line} makes {fixed} of {len(failing)} failing "
                                     f"test(s) pass")
        return result(None, f"gave up: no inverse mutation at the {min(len(ranked), max_lines)} most suspicious "
                            f"line(s) makes the tests pass ({tried} candidate(s))")
    finally:
        sandbox.reset(_GIVEN)


def _python(sandbox: Sandbox) -> str:
    res = sandbox.run("command -v python >/dev/null 2>&1 && echo python || echo python3", timeout=timeouts.ONE_PATH)
    return res.output.strip().splitlines()[-1] if res.ok and res.output.strip() else "python3"


def _all_pass(statuses: dict[str, str], baseline: set[str], failing: list[str]) -> bool:
    if not statuses or any(s in (FAILED, ERROR) for s in statuses.values()):
        return False
    must = baseline | set(failing)
    return all(statuses.get(t) in (PASSED, SKIPPED) for t in must) and all(statuses.get(t) == PASSED for t in failing)


def _partial(statuses: dict[str, str], baseline: set[str], failing: list[str]) -> int:
    """How many failing tests a candidate made pass, if it broke no passing test (else 0)."""
    if not statuses or any(statuses.get(t) not in (PASSED, SKIPPED) for t in baseline):
        return 0
    return sum(1 for t in failing if statuses.get(t) == PASSED)


def _ochiai(tm, failing: set[str], patterns: list[str], protected: set[str],
            rng: random.Random) -> list[tuple[str, int, float]]:
    """(path, line, score) of code lines covered by a failing test, most suspicious first."""
    fail_idx = {i for i, c in enumerate(tm.contexts)
                if c in failing or tm.outcomes.get(c) in (FAILED, ERROR)}
    pass_idx = {i for i, c in enumerate(tm.contexts) if i not in fail_idx and tm.outcomes.get(c) == PASSED}
    n_fail = len(fail_idx)
    if not n_fail:
        return []
    scored = []
    for path in sorted(tm.files):
        if not path.endswith(".py") or path in protected or is_test_like(path, patterns):
            continue
        for line, ctxs in sorted(tm.lines_by_test(path).items()):
            ef = len(ctxs & fail_idx)
            if not ef:
                continue
            ep = len(ctxs & pass_idx)
            scored.append((path, line, ef / math.sqrt(n_fail * (ef + ep)), rng.random()))
    scored.sort(key=lambda x: (-x[2], x[3]))
    return [(p, l, s) for p, l, s, _ in scored]


def _candidates(st: SourceText, line: int):
    """Inverse mutations whose edit starts on `line`, in REPAIR_OPERATORS order."""
    out = []
    for func in functions(st):
        if not func.first_line <= line <= func.end_line:
            continue
        for m in mutations(st, func, REPAIR):
            if st.line_of(m.edits[0].start) != line:
                continue
            if m.operator == "constant_change" and not m.detail.startswith(("`True`", "`False`")):
                continue  # a changed string or number is no inverse of anything the injector does
            out.append(m)
    out.sort(key=lambda m: (REPAIR_OPERATORS.index(m.operator), m.edits[0].start, m.detail))
    return out
