"""Test statuses, one test run's record, and the strict reading of a parser's output (test id -> status)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .text import clip

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"


#: an expected failure that passed (pytest's non-strict XPASS): not a failure of the run, but not a pass either,
#: so a FAIL_TO_PASS or PASS_TO_PASS test reported so fails the grade (as a strict xfail would)
XPASSED = "xpassed"


STATUSES = (PASSED, FAILED, SKIPPED, ERROR, XPASSED)


class ParseError(ValueError):
    """The parser's output is not one JSON object of test id → allowed status."""


@dataclass
class TestRun:
    """One execution of test_script.sh + test_parser.py."""

    log: str
    exit_code: int
    seconds: float
    timed_out: bool
    truncated: bool
    statuses: dict[str, str] = field(default_factory=dict)
    parse_error: str | None = None
    parser_output: str = ""
    #: with `run_tests(parse_twice=True)`: the statuses of a second parse of the same log (None: it failed)
    reparsed: dict[str, str] | None = None
    #: the parser did not finish within its budget (`parse_error` says so): it hangs on this log
    parse_timed_out: bool = False
    #: the end of test_parser.py's stderr (its traceback) when the parse failed, kept for the logs
    parser_stderr: str = ""

    @property
    def passed(self) -> set[str]:
        return {t for t, s in self.statuses.items() if s == PASSED}

    def summary(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for s in self.statuses.values():
            counts[s] = counts.get(s, 0) + 1
        return {
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "timed_out": self.timed_out,
            "log_truncated": self.truncated,
            "parse_error": self.parse_error,
            "parse_timed_out": self.parse_timed_out,
            "counts": counts,
            "statuses": self.statuses,
        }

    @classmethod
    def from_summary(cls, data: dict[str, Any], log: str = "") -> "TestRun":
        return cls(
            log=log,
            exit_code=int(data.get("exit_code", -1)),
            seconds=float(data.get("seconds", 0.0)),
            timed_out=bool(data.get("timed_out", False)),
            truncated=bool(data.get("log_truncated", False)),
            statuses=dict(data.get("statuses", {})),
            parse_error=data.get("parse_error"),
            parse_timed_out=bool(data.get("parse_timed_out", False)),
        )


def parse_statuses(text: str) -> dict[str, str]:
    """Strictly decode the parser's stdout. Raises ParseError with a message saying what to fix."""
    stripped = text.strip()
    if not stripped:
        raise ParseError("test_parser.py printed nothing; it must print one JSON object {test id: status}")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for k, v in pairs:
            if k in seen:
                raise ParseError(f"test_parser.py printed the test id {clip(repr(k), 300)} twice; test ids must be unique")
            seen[k] = v
        return seen

    try:
        data = json.loads(stripped, object_pairs_hook=no_duplicates)
    except json.JSONDecodeError as e:
        preview = " ".join(stripped.split())[:120]
        raise ParseError(f"test_parser.py did not print valid JSON ({e.msg} at char {e.pos}); "
                         f"it printed: {preview!r}") from None
    if not isinstance(data, dict):
        raise ParseError(f"test_parser.py printed a JSON {type(data).__name__}, not an object {{test id: status}}")
    out: dict[str, str] = {}
    for k, v in data.items():
        if not isinstance(v, str) or v.strip().lower() not in STATUSES:
            raise ParseError(f"test {clip(repr(k), 300)} has status {clip(repr(v), 300)}; allowed: {', '.join(STATUSES)}")
        out[k] = v.strip().lower()
    return out
