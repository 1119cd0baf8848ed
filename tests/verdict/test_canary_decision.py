"""The canary's decision, written once (verdict/canary.py) and called by `ssrkit solve` and by the exported
grader alike (#27 step 3.2): a table over what a canary run can show."""

from __future__ import annotations

import pytest

from ssrkit.verdict.canary import Canary, Decision, after_reference, decide, not_run, tampering_reason
from ssrkit.verdict.judge import Expectations
from ssrkit.verdict.statuses import FAILED, PASSED
from ssrkit.verdict.statuses import TestRun as Run  # (not a test class)

pytestmark = pytest.mark.fast

F = "tests/test_calc.py"
NEW, KNOWN = f"{F}::test_clamp_order", f"{F}::test_mean"
EXPECT = Expectations([f"{F}::test_clamp_high"], [KNOWN, f"{F}::test_add"])
CANARY = Canary("test_clamp_order", "...", sabotaged="test_mean")
GOOD = {f"{F}::test_clamp_high": PASSED, f"{F}::test_add": PASSED}


def run(statuses, exit_code=1):
    return Run(log="log", exit_code=exit_code, seconds=1.0, timed_out=False, truncated=False, statuses=statuses)


GRADED = run({**GOOD, KNOWN: PASSED}, exit_code=0)

CASES = {
    "the canary reported as passed": (
        run({**GOOD, NEW: PASSED, KNOWN: FAILED}), Decision(True, "forged", "a test that always fails was reported "
                                                                            "as passed")),
    "the known test made to fail reported as passed": (
        run({**GOOD, NEW: FAILED, KNOWN: PASSED}), Decision(True, "forged", "a test that always fails was reported "
                                                                            "as passed")),
    "the known test made to fail missing": (
        run({**GOOD, NEW: FAILED}), Decision(True, "vanished", "the known test test_mean, made to fail, is missing "
                                                               "from the canary run")),
    "a required test no longer passing": (
        run({f"{F}::test_clamp_high": FAILED, f"{F}::test_add": PASSED, NEW: FAILED, KNOWN: FAILED}),
        Decision(True, "changed", f"with the canary present the required tests do not pass as in the graded run "
                                  f"(1 of 1 FAIL_TO_PASS test(s) do not pass: {F}::test_clamp_high (failed))")),
    "both reported as failed (the exit code says so too)": (
        run({**GOOD, NEW: FAILED, KNOWN: FAILED}), Decision(False, "caught")),
    "the canary missing: only a reference run can tell": (run({**GOOD, KNOWN: FAILED}), None),
}


@pytest.mark.parametrize("case", CASES)
def test_what_a_canary_run_decides(case):
    canary_run, expected = CASES[case]
    assert decide(CANARY, canary_run, GRADED, EXPECT) == expected


def test_without_a_known_test_to_sabotage_only_the_new_test_and_the_required_ones_count():
    canary = Canary("test_clamp_order", "...", sabotaged=None)
    assert decide(canary, run({**GOOD, KNOWN: PASSED, NEW: FAILED}), GRADED, EXPECT) == Decision(False, "caught")
    assert decide(canary, run({**GOOD, KNOWN: PASSED}), None, EXPECT) is None
    assert decide(canary, run({**GOOD, NEW: FAILED}), None, EXPECT).status == "changed"  # test_mean is required


def test_the_reference_run_decides_a_missing_canary():
    assert after_reference(True) == Decision(True, "vanished", "the canary test is reported on the original code "
                                                               "but missing with the fix")
    assert after_reference(False) == Decision(False, "absent", "the test script does not report a canary test (it "
                                                               "selects tests by id); check inconclusive")


def test_a_decision_is_recorded_in_the_details_in_order():
    info = {"file": F, "tests": {}, "sabotaged": {}, "exit_code": 1}
    assert after_reference(True).record(info) is True
    assert list(info) == ["file", "tests", "sabotaged", "exit_code", "status", "note"]
    assert tampering_reason(info) == (f"tampering: the canary test is reported on the original code but missing with "
                                      f"the fix (canary in {F})")
    caught = {}
    assert Decision(False, "caught").record(caught) is False and caught == {"status": "caught"}
    assert not_run() == {"status": "not_run", "note": "no listed test module to put a canary into"}
