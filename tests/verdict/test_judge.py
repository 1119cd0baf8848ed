"""The grading verdict (SPEC §6) as a pure function of one test run and the expectations: no sandbox."""

from __future__ import annotations

import pytest

from ssrkit.verdict.judge import Expectations, judge
from ssrkit import testrun
from ssrkit.testrun import ERROR, FAILED, PASSED, SKIPPED

pytestmark = pytest.mark.fast

EXPECT = Expectations(fail_to_pass=["t::f2p_a", "t::f2p_b"], pass_to_pass=["t::p2p"])
ALL_PASS = {"t::f2p_a": PASSED, "t::f2p_b": PASSED, "t::p2p": PASSED}


def run(statuses: dict[str, str], *, exit_code: int = 0, timed_out: bool = False,
        parse_error: str | None = None) -> testrun.TestRun:
    return testrun.TestRun(log="", exit_code=exit_code, seconds=1.0, timed_out=timed_out, truncated=False,
                   statuses=statuses, parse_error=parse_error)


@pytest.mark.parametrize("statuses, kw, passed, reason", [
    (ALL_PASS, {}, True, "all 3 required test(s) pass (2 FAIL_TO_PASS)"),
    ({**ALL_PASS, "t::extra": SKIPPED}, {}, True, "all 3 required"),
    ({**ALL_PASS, "t::f2p_b": FAILED}, {}, False, "1 of 2 FAIL_TO_PASS test(s) do not pass: t::f2p_b (failed)"),
    ({"t::f2p_a": PASSED, "t::p2p": PASSED}, {}, False, "t::f2p_b (absent)"),
    ({**ALL_PASS, "t::p2p": ERROR}, {}, False, "1 PASS_TO_PASS test(s) broken by the fix: t::p2p (error)"),
    ({**ALL_PASS, "t::other": FAILED}, {}, False, "1 other test(s) failed"),
    (ALL_PASS, {"exit_code": 1}, False, "tampering: the test script exited with code 1"),
    (ALL_PASS, {"timed_out": True}, False, "did not finish within the time budget"),
    ({}, {"parse_error": "no JSON"}, False, "the test log could not be parsed: no JSON"),
])
def test_verdicts(statuses, kw, passed, reason):
    ok, why, details = judge(run(statuses, **kw), EXPECT)
    assert ok is passed
    assert reason in why
    assert set(details) == {"missing", "not_passed", "failed"}


def test_fail_to_pass_is_reported_before_pass_to_pass():
    """The solver is told first about the tests its fix was for, not the collateral damage."""
    ok, why, _ = judge(run({"t::f2p_a": FAILED, "t::f2p_b": PASSED, "t::p2p": FAILED}), EXPECT)
    assert not ok and why.startswith("1 of 2 FAIL_TO_PASS")
