"""Strict decoding of test_parser.py output."""

import pytest

from ssrkit.testrun import ParseError, parse_statuses


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
