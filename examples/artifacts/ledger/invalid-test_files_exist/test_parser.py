#!/usr/bin/env python3
"""Parse a ``python -m unittest -v`` log into a JSON map of test id -> status.

Reads the log on stdin and prints ONE JSON object, e.g.
``{"tests.test_money.TestParse.test_signs": "passed"}``.

Understood progress lines (unittest writes them to stderr; run with ``2>&1``)::

    test_x (tests.test_mod.TestCls.test_x) ... ok            (Python >= 3.11)
    test_x (tests.test_mod.TestCls) ... FAIL                 (Python <= 3.10)
    test_x (tests.test_mod.TestCls.test_x)                   (a test with a docstring:
    First line of the docstring ... ERROR                     the status follows it)
    test_x (tests.test_mod.TestCls.test_x) ... skipped 'reason'
    test_x (tests.test_mod.TestCls.test_x) ... expected failure
    test_x (tests.test_mod.TestCls.test_x) ... unexpected success
    test_x (tests.test_mod.TestCls.test_x) ...               (subtests, Python >= 3.11:
      test_x (tests.test_mod.TestCls.test_x) (i=2) ... FAIL   one line per failing subtest)
    test_x (tests.test_mod.TestCls) ... test_y (tests.test_mod.TestCls) ... ok
                                                             (subtests, Python <= 3.10)
    setUpClass (tests.test_mod.TestCls) ... ERROR
    test_mod (unittest.loader._FailedTest.test_mod) ... ERROR (import error)

Output printed by a test may come between the header and the status; the status
is then taken from the end of a later line, and a line holding only a status wins.
The ``FAIL: ...`` / ``ERROR: ...`` headers of the failure report are used as well.

Ids are ``module.Class.method`` (setUpClass and friends: ``module.Class.setUpClass``).
Statuses: ``ok`` and ``expected failure`` -> passed, ``FAIL`` and ``unexpected success``
-> failed, ``ERROR`` -> error, ``skipped ...`` -> skipped.  A test reported twice gets
the worst status (error > failed > passed > skipped); a failed subtest fails its test.

Only the standard library is used, so this file can be copied into an artifact as
``test_parser.py``.
"""

import json
import re
import sys

RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}

_HEADER = re.compile(r"^(?P<name>[A-Za-z_]\w*) \((?P<where>[A-Za-z_][\w.]*)\)(?P<rest>.*)$")
_SUBTEST = re.compile(r"^\s+(?P<name>[A-Za-z_]\w*) \((?P<where>[A-Za-z_][\w.]*)\) \(.*\) \.\.\. (?P<status>.*)$")
_STATUS = r"(ok|FAIL|ERROR|skipped(?: .*)?|expected failure|unexpected success)"
_STATUS_ONLY = re.compile(r"^" + _STATUS + r"$")
_STATUS_AT_END = re.compile(r"(?:^|\s)" + _STATUS + r"$")
_REPORT = re.compile(r"^(FAIL|ERROR|UNEXPECTED SUCCESS): (?P<name>[A-Za-z_]\w*) \((?P<where>[A-Za-z_][\w.]*)\)")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _status(word):
    if word == "ok" or word == "expected failure":
        return "passed"
    if word == "FAIL" or word == "unexpected success" or word == "UNEXPECTED SUCCESS":
        return "failed"
    if word == "ERROR":
        return "error"
    if word.startswith("skipped"):
        return "skipped"
    return None


def _test_id(name, where):
    if where == name or where.endswith("." + name):
        return where
    return where + "." + name


def _merge(result, test_id, status):
    old = result.get(test_id)
    if old is None or RANK[status] > RANK[old]:
        result[test_id] = status


def parse(log):
    result = {}
    current = None  # the test whose status is still to come
    guess = None  # a status read from the end of a line of the test's own output

    def finish():
        if current is not None and guess is not None:
            _merge(result, current, guess)

    for raw in log.splitlines():
        line = _ANSI.sub("", raw).rstrip("\r").rstrip()
        report = _REPORT.match(line)
        if report:
            finish()
            current = guess = None
            _merge(result, _test_id(report.group("name"), report.group("where")), _status(report.group(1)))
            continue
        sub = _SUBTEST.match(line)
        if sub:
            status = _status(sub.group("status").strip())
            if status in ("failed", "error"):
                _merge(result, _test_id(sub.group("name"), sub.group("where")), status)
            continue
        header = _HEADER.match(line)
        if header:
            finish()
            current, guess = None, None
            while header:
                test_id = _test_id(header.group("name"), header.group("where"))
                rest = header.group("rest")
                header = None
                if rest.startswith(" ..."):
                    after = rest[4:].strip()
                    if _STATUS_ONLY.match(after):
                        _merge(result, test_id, _status(after))
                        continue
                    # Python <= 3.10 writes nothing after a test with failed subtests,
                    # so the next test's progress line continues on the same line
                    header = _HEADER.match(after)
                    if header:
                        continue
                    current = test_id
                    end = _STATUS_AT_END.search(after)
                    guess = _status(end.group(1)) if end else None
                elif not rest:
                    current = test_id  # docstring variant: the status follows on the next line
            continue
        if current is None:
            continue
        text = line.strip()
        if " ... " in text:  # the docstring variant: "First line of the docstring ... ok"
            text = text.rsplit(" ... ", 1)[1].strip()
        if _STATUS_ONLY.match(text):
            _merge(result, current, _status(text))
            current = guess = None
            continue
        end = _STATUS_AT_END.search(line)
        if end:
            guess = _status(end.group(1))
    finish()
    return result


def main():
    data = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    print(json.dumps(parse(data), sort_keys=True))


if __name__ == "__main__":
    main()
