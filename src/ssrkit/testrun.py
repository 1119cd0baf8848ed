"""Run an artifact's tests in a sandbox state and turn the log into test statuses.

`test_script.sh` runs at the repository root with a timeout; its log is piped into `test_parser.py`, whose
stdout must be one JSON object mapping test id → status. Both scripts are written to the sandbox's scratch
directory just before use, so nothing the tests do can replace them. Parsing is strict: duplicate keys and
unknown statuses are errors a person can act on.
"""

from __future__ import annotations

import math
import re
import shlex
import threading
import time
from importlib import resources
from typing import Sequence

from .store.artifact import TEST_PARSER, TEST_SCRIPT
from .errors import SandboxError
from .sandbox import timeouts
from .sandbox.base import PRISTINE, ExecResult, Sandbox
from .sandbox.capture import TIMEOUT_EXIT_CODE, decode_output
from .text import clip
# test statuses and a run's record are the verdict's (standard library only, shipped in exported tasks);
# importers of ssrkit.testrun keep finding them here
from .verdict.statuses import (ERROR, FAILED, PASSED, SKIPPED, STATUSES, XPASSED, ParseError,  # noqa: F401
                               TestRun, parse_statuses)

#: Seconds one test run may take (`[validate] timeout`, `--timeout`): validation, grading and the injectors.
TEST_TIMEOUT = 90.0

#: seconds a parse may take (`[validate] parser_timeout`), counted from when its log is complete
PARSER_TIMEOUT = 60.0
STDERR_TAIL = 8192  # bytes of the parser's stderr read back after a failure


def why_no_tests(log: str, exit_code: int, script: str) -> str:
    """What most likely kept a run from giving the parser any test, said so a person can act on it: the
    script's line endings, or the log's line that names the cause (a runner rejecting an option of a plugin
    that is not installed, a command or module not found), else the log's first line."""
    fix = f"check that {TEST_SCRIPT} runs the tests and prints a per-test log (e.g. pytest -rA, with 2>&1)"
    if "\r\n" in script:
        return (f"{TEST_SCRIPT} has Windows line endings (CRLF), so bash reads a carriage return at the end of "
                f"every command; convert it to LF (e.g. dos2unix {TEST_SCRIPT})")
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]

    def first(*needles: str) -> str | None:
        return next((ln for ln in lines if any(n in ln for n in needles)), None)

    if line := first("unrecognized arguments", "no such option"):
        return (f"the test runner rejected an option ({clip(line, 300)!r}): a plugin {TEST_SCRIPT} relies on is "
                f"not installed where the tests run (e.g. pytest-cov for --cov, pytest-xdist for -n); install it "
                f"there (activate its virtualenv) or drop the option")
    if exit_code == 127 or (line := first("command not found")):
        line = line or first("not found", "No such file or directory") or (lines[0] if lines else "")
        return (f"a command {TEST_SCRIPT} runs was not found (exit code {exit_code}: {clip(line, 300)!r}); "
                f"install it where the tests run (activate the virtualenv that has it) or fix the script")
    if line := first("No module named"):
        return (f"the tests' Python lacks a module ({clip(line, 300)!r}); activate the virtualenv the tests need "
                f"before running ssrkit (or give the repository's ssrkit.toml a [sandbox] setup)")
    if lines:
        return f"the log begins {clip(lines[0], 300)!r}; {fix}"
    return f"the log is empty; {fix}"


def run_parser(sandbox: Sandbox, parser: str, log: str, *, timeout: float | None = None,
               twice: bool = False) -> tuple[dict[str, str] | None, str | None, str]:
    """Run test_parser.py on a log; return (statuses or None, error or None, raw stdout).

    The parser runs on the interpreter `python3` resolves to in the sandbox (`Sandbox.interpreter`: shims
    followed once, not on every run), within `timeout` (default `PARSER_TIMEOUT`). With `twice`, a second run
    on the same log goes alongside the first in the same command (validation's determinism check, for the
    cost of neither a second command nor a second start-up in a row); its result is in
    `last_reparse(sandbox)`."""
    return _run_parser(sandbox, parser, log, timeout=timeout, twice=twice)[:3]


def _run_parser(sandbox: Sandbox, parser: str, log: str, *, timeout: float | None, twice: bool,
                limit: float = math.inf) -> tuple[dict[str, str] | None, str | None, str, bool]:
    """`run_parser`, and whether the parse ran out of time; `limit`: the wall-clock time (time.time()) it
    must end by, whatever its budget."""
    budget = PARSER_TIMEOUT if timeout is None else timeout
    budget = max(min(budget, limit - time.time()), 0.0)
    log_file = sandbox.scratch_path(_LOG)
    sandbox.write_file(log_file, log.encode("utf-8", "replace"))
    python, path, err = _write_parser(sandbox, parser)
    if not twice:  # the command ends with the parser (what it left dies with the command)
        res = sandbox.run(f"{python} {path} <{log_file} 2>{err}", timeout=budget)
        return _parse_result(sandbox, res.exit_code, res.timed_out, res.output, budget)
    flag = _clear_flag(sandbox)
    parse = _parse_args(sandbox, python, path, log_file, budget, math.inf, twice, flag)
    res = sandbox.run(f"{python} {_write_waiter(sandbox)} --parse {parse} 2>{err}", timeout=budget + 5)
    return _parse_result(sandbox, res.exit_code, res.timed_out or _flagged(sandbox, flag), res.output, budget)


def _parse_args(sandbox: Sandbox, python: str, path: str, log_file: str, budget: float, limit: float,
                twice: bool, flag: str) -> str:
    """PARSE of `templates/parse_ahead.py` (its module docstring), shell-quoted."""
    if twice:
        out2, rc2 = sandbox.scratch_path(_OUT2), sandbox.scratch_path(_RC2)
        sandbox.write_file(rc2, "")
    else:
        out2 = rc2 = "-"
    return " ".join([path, log_file, f"{budget:.3f}", "inf" if math.isinf(limit) else f"{limit:.3f}",
                     out2, rc2, flag, python])


def _clear_flag(sandbox: Sandbox) -> str:
    """The scratch file where `parse_ahead.py` says a parse ran out of time, emptied."""
    flag = sandbox.scratch_path(_FLAG)
    sandbox.write_file(flag, "")
    return flag


def _flagged(sandbox: Sandbox, flag: str) -> bool:
    try:
        return sandbox.read_file(flag).strip() == b"timeout"
    except (OSError, SandboxError):
        return False


def _write_parser(sandbox: Sandbox, parser: str) -> tuple[str, str, str]:
    """(the interpreter, test_parser.py written to scratch, the scratch file for its stderr), shell-quoted."""
    path, err = sandbox.scratch_path(TEST_PARSER), sandbox.scratch_path(_ERR)
    sandbox.write_file(path, parser)
    return shlex.quote(sandbox.interpreter("python3")), path, err


def _write_waiter(sandbox: Sandbox) -> str:
    """`templates/parse_ahead.py` written to scratch, next to test_parser.py (its sys.path[0] is the parser's)."""
    path = sandbox.scratch_path(_AHEAD)
    sandbox.write_file(path, resources.files("ssrkit.templates").joinpath(_AHEAD).read_bytes())
    return path


def _parse_result(sandbox: Sandbox, exit_code: int, timed_out: bool, output: str,
                  timeout: float) -> tuple[dict[str, str] | None, str | None, str, bool]:
    """(statuses or None, error or None, raw stdout, timed out) of a parse command that ended so."""
    if timed_out:
        return None, f"test_parser.py did not finish within {timeout:.0f}s", output, True
    if exit_code != 0:
        # only the end of stderr is read back (a parser can write gigabytes), and only its last line shown,
        # with the parser's line the traceback names last (a SyntaxError says where only there)
        tail = parser_stderr(sandbox)
        lines = [ln for ln in tail.strip().splitlines() if ln.strip()]
        last = clip(lines[-1], 1024) if lines else "no error output"
        where = _PARSER_LINE.findall(tail)
        at = f" (test_parser.py line {where[-1]})" if where else ""
        return None, f"test_parser.py exited with code {exit_code}: {last}{at}", output, False
    try:
        return parse_statuses(output), None, output, False
    except ParseError as e:
        return None, clip(str(e)), output, False


def parser_stderr(sandbox: Sandbox) -> str:
    """The end (STDERR_TAIL bytes) of the last parse's stderr in `sandbox`."""
    try:
        tail = sandbox.run(f"tail -c {STDERR_TAIL} {sandbox.scratch_path(_ERR)}", timeout=timeouts.ONE_PATH)
    except SandboxError:
        return ""
    return tail.output if tail.ok else ""


_PARSER_LINE = re.compile(r'File "[^"\n]*test_parser\.py", line (\d+)')
_LOG, _ERR, _OUT2, _RC2 = "test_parser.log", "test_parser.err", "test_parser.out2", "test_parser.rc2"
_FLAG = "test_parser.timeout"  # `parse_ahead.py` writes `timeout` there when a parse ran out of time
#: `_ParseAhead`: the waiting script (a template of the same name), its signal to go, what it says it did
_AHEAD, _SIGNAL, _STATUS = "parse_ahead.py", "test_parser.signal", "test_parser.status"
REPARSE_BYTES = 16 * 1024 * 1024  # stdout of the second run kept (`parse_ahead.REPARSE_BYTES`)


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
              checks: Sequence[tuple[str, str]] = (), parse_twice: bool = False,
              parser_timeout: float | None = None, limit: float = math.inf) -> TestRun:
    """Apply `diffs` ((label, diff) in order) to the sandbox's current state, run the test script, then parse
    its log (in `parse_in` when given: grading parses where the code under test never ran, so it cannot
    tamper with the parser); `parse_twice` parses it twice at once (`run_parser`), the second in `reparsed`.
    `checks`: diffs that must also apply on top of `diffs` (`git apply --check`, before the script runs).
    `parser_timeout`: the parse's budget (default `PARSER_TIMEOUT`), cut to end by `limit` (a wall-clock
    time, time.time(): validation's budget for the artifact) where the parse is not made ahead.

    The applies and the test script are one command (one sandbox start): the applies' output goes to a
    scratch file, shown only when one fails (PatchError naming that diff's label, the script not run), so
    the log is the script's output alone. Where the sandbox allows (`Sandbox.parses_in_run`) and the parse
    is not elsewhere, the parser runs in that command too (`_run_and_parse`).
    """
    (parse_in or sandbox).interpreter("python3")  # resolved before the tests run, in a state they never touched
    script = sandbox.scratch_path(TEST_SCRIPT)
    sandbox.write_file(script, test_script, mode=0o755)
    applies = sandbox.applies(diffs, checks=checks)
    budget = PARSER_TIMEOUT if parser_timeout is None else parser_timeout
    if parse_in is None and sandbox.parses_in_run:
        return _run_and_parse(sandbox, script, test_parser, timeout, applies, parse_twice, budget, limit)
    ahead = None
    if parse_in is not None and parse_in is not sandbox and parse_in.parses_ahead and not parse_twice:
        ahead = _ParseAhead(parse_in, test_parser, wait=timeout + 30, budget=budget)
    try:
        res = sandbox.run(applies.command(f"bash {script}"), timeout=timeout)
        applies.check(res.output)
    except BaseException:
        if ahead is not None:
            ahead.stop()
        raise
    run = TestRun(log=res.output, exit_code=res.exit_code, seconds=res.seconds, timed_out=res.timed_out,
                  truncated=res.truncated)
    done = ahead.parse(run.log) if ahead is not None else None
    if done is not None:
        _set_parse(run, done, None)
        _keep_stderr(run, ahead.sandbox)
        return run
    if parse_in is not None:
        parse_in.reset(PRISTINE)  # after the run: the parsing sandbox may be the one that ran the tests
    _parse_separately(parse_in or sandbox, run, test_parser, parse_twice, budget, limit)
    return run


class _ParseAhead:
    """test_parser.py started in another sandbox while the tests run (`templates/parse_ahead.py`): Python's
    start-up and the sandbox's are paid during the test run; once the log is known, the host writes it and
    the signal to go, and only the parse itself is left. The parser sees the same bytes on its stdin, with
    the same budget (`budget`, counted from the signal: past it the host kills the command,
    `Sandbox.interrupt`), as a parse started afterwards (`run_parser`). Where the parser could not be
    started ahead, `parse` returns None: parse the ordinary way."""

    def __init__(self, sandbox: Sandbox, parser: str, *, wait: float, budget: float) -> None:
        self.sandbox = sandbox
        self.budget = budget
        self.log, self.signal, self.status = (sandbox.scratch_path(n) for n in (_LOG, _SIGNAL, _STATUS))
        self._ready = threading.Event()
        self._res: ExecResult | None = None
        self._failed = False
        self._thread = threading.Thread(target=self._run, args=(parser, wait), daemon=True,
                                        name="ssrkit-parse-ahead")
        self._thread.start()

    def _run(self, parser: str, wait: float) -> None:
        sb = self.sandbox
        try:
            sb.reset(PRISTINE)
            script = _write_waiter(sb)
            python, path, err = _write_parser(sb, parser)
            for left in (self.signal, self.status):  # scratch outlives a reset: no word of an earlier parse
                sb.write_file(left, "")
            cmd = " ".join([python, *map(shlex.quote, (script, path, self.log, self.signal, self.status)),
                            f"{wait:.3f} 2>{shlex.quote(err)}"])
        except Exception:
            self._failed = True
            return
        finally:
            self._ready.set()
        try:
            self._res = sb.run(cmd, timeout=wait + self.budget + 30)
        except BaseException:  # noqa: BLE001 - Interrupted too (a daemon thread): the caller's next command meets it
            self._failed = True

    def _say(self, word: str, log: bytes = b"") -> bool:
        """Write the log (with `go`) and then the signal; False when no parser waits for one."""
        self._ready.wait()
        if self._failed:
            return False
        try:
            if word == "go":
                self.sandbox.write_file(self.log, log)
            self.sandbox.write_file(self.signal, word)
            return True
        except (OSError, SandboxError):
            return False

    def parse(self, log: str) -> tuple[dict[str, str] | None, str | None, str, bool] | None:
        """(statuses or None, error or None, raw stdout, timed out); None: parse it yourself."""
        said = self._say("go", log.encode("utf-8", "replace"))
        if not said:
            self._say("stop")
        limit = self.budget
        self._thread.join(limit)
        timed_out = self._thread.is_alive()
        if timed_out:  # the parser's budget is over: its command is killed, as a parse command's would be
            self.sandbox.interrupt()
            self._thread.join()
        res = self._res
        if not said or self._failed or res is None:
            return None
        try:
            status = self.sandbox.read_file(self.status).decode("ascii", "replace").strip()
        except (OSError, SandboxError):
            return None
        if status != "started":  # it never got to the parse
            return None
        return _parse_result(self.sandbox, res.exit_code, timed_out or res.timed_out, res.output, limit)

    def stop(self) -> None:
        """Nothing to parse (the tests did not run): the waiting parser ends without running."""
        self._say("stop")
        self._thread.join()


def _parse_separately(sandbox: Sandbox, run: TestRun, parser: str, twice: bool, budget: float,
                      limit: float) -> None:
    done = _run_parser(sandbox, parser, run.log, timeout=budget, twice=twice, limit=limit)
    _set_parse(run, done, last_reparse(sandbox) if twice and done[0] is not None else None)
    _keep_stderr(run, sandbox)


def _keep_stderr(run: TestRun, sandbox: Sandbox) -> None:
    """A failed parse keeps the parser's stderr (its traceback), for the logs."""
    if run.parse_error:
        run.parser_stderr = parser_stderr(sandbox)


def _set_parse(run: TestRun, done: tuple[dict[str, str] | None, str | None, str, bool],
               reparsed: dict[str, str] | None) -> None:
    """Record a parse that ended so (statuses or None, error or None, raw stdout, timed out)."""
    statuses, error, run.parser_output, run.parse_timed_out = done
    run.reparsed = reparsed
    if statuses is not None:
        run.statuses = statuses
    else:
        run.parse_error = error


_RUN_LOG, _RUN_STATUS, _RUN_RC = "test_script.log", "test_script.status", "test_script.rc"


def _run_and_parse(sandbox: Sandbox, script: str, parser: str, timeout: float, applies, twice: bool,
                   budget: float, limit: float) -> TestRun:
    """One command for the applies, the test script (its output to a scratch log) and the parser. The shell
    starts the tests in the background, in a process group of their own (`set -m`, as coreutils' `timeout`
    would), and becomes `templates/parse_ahead.py --after-tests`: Python starts while the tests run. It
    waits for them up to their budget, kills every process they left (`kill(-1)`: the command's pid
    namespace holds nothing else), writes their exit code, times and log size, then parses the log the
    host keeps, byte for byte: a forked copy of it becomes the parser, which runs alone, as in a command of
    its own, within its own `budget` counted from the end of the tests (and by `limit`); the command ends
    with the parser's own exit, whatever it left behind. Where that cannot be (the log is longer than a
    command's output keeps, or not UTF-8, or the tests killed the command itself), the kept log is parsed by
    a command of its own."""
    log_file, status, rc_file = (sandbox.scratch_path(n) for n in (_RUN_LOG, _RUN_STATUS, _RUN_RC))
    sandbox.write_file(status, "")
    sandbox.write_file(rc_file, "")
    ahead = _write_waiter(sandbox)
    python, path, err = _write_parser(sandbox, parser)
    flag = _clear_flag(sandbox)
    parse = _parse_args(sandbox, python, path, log_file, budget, limit, twice, flag)
    cap = sandbox.limits.output_bytes  # type: ignore[attr-defined]
    now = "${EPOCHREALTIME:-$(date +%s.%N)}"  # bash 5, else coreutils
    # the job writes the tests' exit code too: one that ends before the shell execs Python is reaped by the
    # shell, and its status would be lost (the waiting script then reads the file). The job runs the tests
    # in a process group of their own (`set -m` again), so signalling theirs does not reach it; its stderr
    # (where it reports the tests' death by a signal) is not the command's output: that is the parse.
    driver = (f"t0={now}; set -m; {{ set -m; bash {script} >{log_file} 2>&1 </dev/null; r=$?; "
              f"echo $r >{rc_file}; exit $r; }} 2>/dev/null & "
              f"exec {python} {ahead} --after-tests $! $t0 {max(timeout, 0.001):.3f} {log_file} {status} {cap} "
              f"{rc_file} {parse} 2>{err}")
    res = sandbox.run(applies.command(driver), timeout=timeout + budget + 30)
    applies.check(res.output)
    try:
        data, truncated = sandbox.read_capped(log_file)
    except (OSError, SandboxError):  # the tests removed it, or left something else than a file there
        data, truncated = b"", False
    done = _driver_status(sandbox, status)
    if done is None:  # the tests killed the command before it got to the parse (or it ran out of time)
        run = TestRun(log=decode_output(data), exit_code=res.exit_code, seconds=res.seconds,
                      timed_out=res.timed_out, truncated=truncated)
        _parse_separately(sandbox, run, parser, twice, budget, limit)
        return run
    rc, seconds, size = done
    timed_out = rc in (TIMEOUT_EXIT_CODE, 128 + 9) and seconds >= timeout - 0.05
    run = TestRun(log=decode_output(data), exit_code=TIMEOUT_EXIT_CODE if timed_out else rc, seconds=seconds,
                  timed_out=timed_out, truncated=truncated)
    if truncated or size != len(data) or not _is_utf8(data):
        _parse_separately(sandbox, run, parser, twice, budget, limit)  # the parser must see the kept log
        return run
    parsed = _parse_result(sandbox, res.exit_code, res.timed_out or _flagged(sandbox, flag), res.output, budget)
    _set_parse(run, parsed, last_reparse(sandbox) if twice and parsed[0] is not None else None)
    _keep_stderr(run, sandbox)
    return run


def _driver_status(sandbox: Sandbox, path: str) -> tuple[int, float, int] | None:
    """(test exit code, test seconds, log bytes) as `_run_and_parse`'s command wrote them after the tests."""
    try:
        fields = sandbox.read_file(path).decode("ascii").split()
        rc, t0, t1, size = int(fields[0]), float(fields[1]), float(fields[2]), int(fields[3])
    except (OSError, SandboxError, UnicodeDecodeError, ValueError, IndexError):
        return None
    return rc, max(t1 - t0, 0.0), size


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
