#!/usr/bin/env python3
"""Parse a ``pytest -rA`` log into a JSON map of test id -> status.

Reads the log on stdin and prints ONE JSON object, e.g.
``{"tests/test_a.py::test_x[1-2]": "passed", "tests/test_a.py::test_y": "failed"}``.

Sources, in this order of trust:

* the short test summary that ``-rA`` prints:
  ``PASSED id``, ``FAILED id - message``, ``ERROR id - message``, ``XFAIL id - reason``,
  ``XPASS id - reason`` (``XPASS id reason`` before pytest 8), ``SUBFAILED(...) id - message``,
  ``SKIPPED id - reason`` (``--no-fold-skipped``, pytest 8.3 and later);
* the progress lines of ``-v`` (``tests/test_a.py::test_x PASSED  [ 50%]``), when present.
  They give exact ids, which settles parametrize ids containing `` - `` and gives skipped
  tests their node id.

A skip that pytest folds into ``SKIPPED [n] file:line: reason`` (``-rA`` without ``-v`` or
``--no-fold-skipped``) names no test, so it is not reported: a test id is always a node id,
never a ``file:line`` location.

Statuses: passed, failed, error, skipped, xpassed.  ``XFAIL`` counts as passed (the test
behaves as its author expects).  A non-strict ``XPASS`` is its own status, ``xpassed``: pytest
does not fail the run for it, but grading requires a listed test to *pass*, so an xpassed
FAIL_TO_PASS or PASS_TO_PASS test fails the grade, as a strict xfail would (pytest itself
reports a strict XPASS as FAILED).
A test reported more than once (a teardown error after a pass, a failed subtest of a
passing test) gets the worst status: error > failed > xpassed > passed > skipped.  Subtests
(``SUBFAILED(i=2) id``, or ``SUBFAIL id (i=2)`` from the pytest-subtests plugin) are
folded into their test.
A collection error is reported under the file's path (``tests/test_a.py``) as error.

Only the standard library is used, so this file can be copied into an artifact as
``test_parser.py``.
"""

import json
import re
import sys

STATUS_MAP = {
    "PASSED": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "passed",
    "XPASS": "xpassed",
    "SUBPASSED": "passed",
    "SUBFAILED": "failed",
    "SUBSKIPPED": "skipped",
    # the pytest-subtests plugin (before subtests moved into pytest 9)
    "SUBPASS": "passed",
    "SUBFAIL": "failed",
    "SUBSKIP": "skipped",
}
RANK = {"skipped": 0, "passed": 1, "xpassed": 2, "failed": 3, "error": 4}

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_WORD = r"(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS|SUBPASSED|SUBFAILED|SUBSKIPPED|SUBPASS|SUBFAIL|SUBSKIP)"
# summary line: STATUS[(subtest params)] rest
_SUMMARY = re.compile(r"^" + _WORD + r"(?:\(.*?\))? (.+)$")
_SKIP_LOCATION = re.compile(r"^\[\d+\] (.+?:\d+)(?::|$)")
# -v progress line: id STATUS [(reason)]   [ 42%]   (xdist: [gw0] [ 42%] STATUS id)
_PROGRESS = re.compile(r"^(\S.*?::.*?) " + _WORD + r"(?:\(.*?\))?(?: \(.*\))?\s+\[\s*\d+%\]$")
_XDIST = re.compile(r"^\[gw\d+\] \[\s*\d+%\] " + _WORD + r" (\S.*?::.*)$")


def _merge(result, test_id, status):
    old = result.get(test_id)
    if old is None or RANK[status] > RANK[old]:
        result[test_id] = status


def _split_id(rest, known, word=""):
    """Separate the node id from a trailing message in a summary line.

    pytest writes ``id - message`` (and, before pytest 8, ``XPASS id reason``).
    """
    for test_id in sorted((k for k in known if rest.startswith(k)), key=len, reverse=True):
        tail = rest[len(test_id):]
        if tail == "" or tail.startswith(" "):
            return test_id
    first_space = rest.find(" ")
    if first_space == -1:
        return rest
    bracket = rest.find("[")
    if bracket == -1 or bracket > first_space:
        return rest[:first_space]  # ids without parameters hold no spaces
    # parametrized id: it ends at a ']' followed by the end of the line or ' - '
    def ends_id(i):
        after = rest[i + 1 :]
        return after == "" or after.startswith(" - ") or word == "XPASS" and after.startswith(" ")

    candidates = [i for i in range(bracket, len(rest)) if rest[i] == "]" and ends_id(i)]
    if not candidates:
        return rest[:first_space]
    for i in candidates:
        part = rest[bracket : i + 1]
        if part.count("[") == part.count("]"):
            return rest[: i + 1]
    return rest[: candidates[0] + 1]


def parse(log):
    lines = [_ANSI.sub("", line).rstrip("\r") for line in log.splitlines()]
    verbose = {}
    for line in lines:
        match = _PROGRESS.match(line) or _XDIST.match(line)
        if not match:
            continue
        if match.re is _XDIST:
            word, test_id = match.group(1), match.group(2).strip()
        else:
            test_id, word = match.group(1).strip(), match.group(2)
        _merge(verbose, test_id, STATUS_MAP[word])
    known = set(verbose)

    result = {}
    in_summary = False
    for line in lines:
        if re.match(r"^=+ short test summary info =+$", line):
            in_summary = True
            continue
        if in_summary and re.match(r"^(=+|!+) ", line):
            in_summary = False
            continue
        match = _SUMMARY.match(line) if in_summary else None
        if not match:
            continue
        word, rest = match.group(1), match.group(2).strip()
        if word == "SKIPPED" and _SKIP_LOCATION.match(rest):
            continue  # a folded skip: a file:line location, not a test id
        _merge(result, _split_id(rest, known, word), STATUS_MAP[word])

    for test_id, status in verbose.items():
        _merge(result, test_id, status)
    return result


def main():
    data = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    print(json.dumps(parse(data), sort_keys=True))


if __name__ == "__main__":
    main()
