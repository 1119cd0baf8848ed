"""Run an artifact's tests in a sandbox state and turn the log into test statuses.

`test_script.sh` runs at the repository root with a timeout; its log is piped into `test_parser.py`, whose
stdout must be one JSON object mapping test id → status. Both scripts are written to the sandbox's scratch
directory just before use, so nothing the tests do can replace them. Parsing is strict: duplicate keys and
unknown statuses are errors a person can act on.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Sequence

from .artifact import TEST_PARSER, TEST_SCRIPT
from .sandbox.base import PRISTINE, Sandbox
from .text import clip

#: Seconds one test run may take (`[validate] timeout`, `--timeout`): validation, grading and the injectors.
TEST_TIMEOUT = 90.0

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"
#: an expected failure that passed (pytest's non-strict XPASS): not a failure of the run, but not a pass either,
#: so a FAIL_TO_PASS or PASS_TO_PASS test reported so fails the grade (as a strict xfail would)
XPASSED = "xpassed"
STATUSES = (PASSED, FAILED, SKIPPED, ERROR, XPASSED)
PARSER_TIMEOUT = 60.0
STDERR_TAIL = 8192  # bytes of the parser's stderr read back after a failure


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


def run_parser(sandbox: Sandbox, parser: str, log: str, *, timeout: float = PARSER_TIMEOUT,
               twice: bool = False) -> tuple[dict[str, str] | None, str | None, str]:
    """Run test_parser.py on a log; return (statuses or None, error or None, raw stdout).

    The parser runs on the interpreter `python3` resolves to in the sandbox (`Sandbox.interpreter`: shims
    followed once, not on every run). With `twice`, a second run on the same log goes alongside the first in
    the same command (validation's determinism check, for the cost of neither a second command nor a second
    start-up in a row); its result is in `last_reparse(sandbox)`.
    """
    path = sandbox.scratch_path(TEST_PARSER)
    err = sandbox.scratch_path("test_parser.err")
    python = shlex.quote(sandbox.interpreter("python3"))
    sandbox.write_file(path, parser)
    command, stdin = f"{python} {path} 2>{err}", log.encode("utf-8", "replace")
    if twice:
        log_file, out2, rc2 = (sandbox.scratch_path(n) for n in (_LOG, _OUT2, _RC2))
        sandbox.write_file(log_file, stdin)
        sandbox.write_file(rc2, "")
        command = (f"{{ {python} {path} <{log_file} 2>/dev/null | head -c {REPARSE_BYTES} >{out2}; "
                   f"echo ${{PIPESTATUS[0]}} >{rc2}; }} & {python} {path} <{log_file} 2>{err}; rc=$?; wait; exit $rc")
        stdin = None
    res = sandbox.run(command, timeout=timeout, stdin=stdin)
    if res.timed_out:
        return None, f"test_parser.py did not finish within {timeout:.0f}s", res.output
    if res.exit_code != 0:
        # only the end of stderr is read back (a parser can write gigabytes), and only its last line shown
        tail = sandbox.run(f"tail -c {STDERR_TAIL} {err}", timeout=30)
        lines = [ln for ln in tail.output.strip().splitlines() if ln.strip()] if tail.ok else []
        last = clip(lines[-1], 1024) if lines else "no error output"
        return None, f"test_parser.py exited with code {res.exit_code}: {last}", res.output
    try:
        return parse_statuses(res.output), None, res.output
    except ParseError as e:
        return None, clip(str(e)), res.output


_LOG, _OUT2, _RC2 = "test_parser.log", "test_parser.out2", "test_parser.rc2"
REPARSE_BYTES = 16 * 1024 * 1024  # stdout of the second run kept (beyond this it is no JSON object anyway)


def last_reparse(sandbox: Sandbox) -> dict[str, str] | None:
    """The statuses of the second run of the last `run_parser(twice=True)` in `sandbox`; None when it failed,
    printed something else than one JSON object of statuses, or did not finish."""
    try:
        rc = sandbox.read_file(sandbox.scratch_path(_RC2)).decode().strip()
        out = sandbox.read_file(sandbox.scratch_path(_OUT2)).decode("utf-8", "replace")
    except (OSError, UnicodeDecodeError):
        return None
    if rc != "0":
        return None
    try:
        return parse_statuses(out)
    except ParseError:
        return None


def run_tests(sandbox: Sandbox, test_script: str, test_parser: str, *, timeout: float,
              parse_in: Sandbox | None = None, diffs: Sequence[tuple[str, str]] = (),
              parse_twice: bool = False) -> TestRun:
    """Apply `diffs` ((label, diff) in order) to the sandbox's current state, run the test script, then parse
    its log (in `parse_in` when given: grading parses where the code under test never ran, so it cannot
    tamper with the parser); `parse_twice` parses it twice at once (`run_parser`), the second in `reparsed`.

    The applies and the test script are one command (one sandbox start): the applies' output goes to a
    scratch file, shown only when one fails (PatchError naming that diff's label, the script not run), so
    the log is the script's output alone; the applies count in the test budget (they take milliseconds).
    """
    (parse_in or sandbox).interpreter("python3")  # resolved before the tests run, in a state they never touched
    script = sandbox.scratch_path(TEST_SCRIPT)
    sandbox.write_file(script, test_script, mode=0o755)
    applies = sandbox.applies(diffs)
    res = sandbox.run(applies.command(f"bash {script}"), timeout=timeout)
    applies.check(res.output)
    run = TestRun(log=res.output, exit_code=res.exit_code, seconds=res.seconds, timed_out=res.timed_out,
                  truncated=res.truncated)
    if parse_in is not None:
        parse_in.reset(PRISTINE)  # after the run: the parsing sandbox may be the one that ran the tests
    statuses, error, raw = run_parser(parse_in or sandbox, test_parser, res.output, twice=parse_twice)
    run.parser_output = raw
    if parse_twice:
        run.reparsed = last_reparse(parse_in or sandbox) if statuses is not None else None
    if statuses is not None:
        run.statuses = statuses
    else:
        run.parse_error = error
    return run
