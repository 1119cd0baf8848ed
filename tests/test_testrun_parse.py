"""Strict decoding of test_parser.py output."""

import pytest

from ssrkit.testrun import ParseError, parse_statuses

pytestmark = pytest.mark.fast


def test_statuses_normalized():
    assert parse_statuses('{"a": "PASSED", "b": " failed", "c": "skipped", "d": "error"}') == {
        "a": "passed", "b": "failed", "c": "skipped", "d": "error"}


@pytest.mark.parametrize("text, fragment", [
    ("", "printed nothing"),
    ("garbage\x00\xff", "did not print valid JSON"),
    ('["a"]', "not an object"),
    ('{"a": "ok"}', "allowed"),
    ('{"a": 1}', "allowed"),
    ('{"a": "passed", "a": "failed"}', "twice"),
])
def test_bad_parser_output_explains_itself(text, fragment):
    with pytest.raises(ParseError, match=fragment):
        parse_statuses(text)


def test_xpassed_is_a_status_that_fails_a_required_test():
    from ssrkit.verdict.judge import Expectations, judge
    from ssrkit.testrun import TestRun

    statuses = parse_statuses('{"t::f2p": "passed", "t::p2p": "XPASSED", "t::other": "xpassed"}')
    assert statuses["t::p2p"] == "xpassed"
    run = TestRun(log="", exit_code=0, seconds=1.0, timed_out=False, truncated=False, statuses=statuses)
    ok, reason, details = judge(run, Expectations(["t::f2p"], ["t::p2p"]))
    assert not ok and "PASS_TO_PASS" in reason and details["not_passed"] == {"t::p2p": "xpassed"}
    # an xpassed test nobody requires is not a failure of the run (pytest does not fail it either)
    ok, reason, _ = judge(run, Expectations(["t::f2p"], []))
    assert ok, reason
