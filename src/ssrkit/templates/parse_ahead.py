"""Run test_parser.py on a log that does not exist yet, with the interpreter already started.

Python's start-up (~15 ms) is paid while the tests run, not after them, in one of two ways:

- `python3 parse_ahead.py PARSER LOG SIGNAL STATUS WAIT`, grading: started in the clean sandbox while the
  tests run in another one (so that sandbox's start is paid ahead too). It waits (looking every 2 ms)
  for the host to write SIGNAL: `go` once LOG holds the whole log, `stop` when there is nothing to parse.
  On `go` it writes `started` to STATUS and becomes the parser. After WAIT seconds without a signal it
  gives up (`nosignal` in STATUS). The parser's time limit is the host's to keep (it kills the command).
- `python3 parse_ahead.py --after-tests PID T0 BUDGET LOG STATUS CAP RC PARSE...`, validation: the shell of
  the test command starts the tests in the background and becomes this script, which waits for them in
  the same sandbox (`after_tests`), then parses (`parse`).

and one more, with nothing to start ahead:

- `python3 parse_ahead.py --parse PARSE...`: the log exists; parse it (`parse`), for the determinism check
  of a parse made in a command of its own.

PARSE is `PARSER LOG SECONDS LIMIT OUT2 RC2 FLAG PYTHON` (`parse`): a forked copy of this process becomes
the parser, and this process waits for the parser's own exit (not for its output to close: a child the
parser left, `setsid` or not, may hold it open for ever), up to SECONDS, or up to the wall-clock time LIMIT
(seconds since the epoch; `inf`: none). Past it, `timeout` goes to FLAG and the exit code is 124. Else the
exit code is the parser's (128 + N for signal N). With OUT2 (not `-`) a second run of the parser, a fresh
`PYTHON PARSER <LOG`, goes alongside the first: its stdout to OUT2 (at most `REPARSE_BYTES`), its exit code
to RC2. Whatever the parsers left behind dies with the command (its pid namespace, its cgroup, or the
host's kill of its process group).

Becoming the parser is running as `python3 PARSER <LOG` would run: its code in a fresh `__main__` module
(`__file__`, a source loader, no package), `sys.argv = [PARSER]`, the same `sys.path` (this script lives
in the parser's directory), the log on stdin and fd 0, and the interpreter's own exit, so the exit code is
the parser's.

What this script needs besides `json` and `re` is imported from the standard library alone and forgotten
before the parser runs, so a module of the repository's with the same name (the repository is on
PYTHONPATH) neither breaks this script nor is hidden from the parser. `json` and `re` are imported ahead
as the parser would find them. Standard library only: ssrkit is not installed where it runs.
"""

import os
import sys
import time

try:  # ahead of the parser, found as it would find them (most parsers import them)
    import json  # noqa: F401
    import re  # noqa: F401
except BaseException:  # noqa: BLE001  a module of the repository's by that name that fails (or exits):
    pass  # the parser meets the same failure on its own import; this script must not die of it first

_FULL_PATH = sys.path[:]
_BEFORE = set(sys.modules)
sys.path[:] = [p for p in _FULL_PATH if p.startswith((sys.base_prefix, sys.base_exec_prefix))
               and "site-packages" not in p and "dist-packages" not in p]
try:
    import resource
    import signal
finally:
    sys.path[:] = _FULL_PATH
_MINE = set(sys.modules) - _BEFORE  # forgotten before the parser runs: it finds its own

#: seconds between two looks at the signal file. Not inotify: an inotify instance costs ~15 ms when it is
#: closed, which the interpreter's exit would pay after the parse; a look costs some microseconds.
_POLL = 0.002


def _wait_for_signal(path, wait):
    deadline = time.monotonic() + wait
    while True:
        try:
            with open(path) as fh:
                said = fh.read().strip()
        except OSError:
            said = ""
        if said in ("go", "stop"):
            return said
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(_POLL, left))


def _status(path, word):
    with open(path, "w") as fh:
        fh.write(word)


def _become_the_parser(parser, log):
    """Become `python3 PARSER <LOG`: the log on fd 0, this script's own modules forgotten, the parser's code
    run as the `__main__` script; the interpreter's own exit follows (SystemExit, exceptions and
    KeyboardInterrupt reach it as a script's would, threads are joined, streams flushed)."""
    fd = os.open(log, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    for name in _MINE:
        sys.modules.pop(name, None)
    with open(parser, "rb") as fh:
        source = fh.read()
    code = compile(source, parser, "exec")
    main = type(sys)("__main__")
    main.__file__ = parser
    main.__loader__ = type(sys.modules["__main__"].__loader__)("__main__", parser)
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    sys.argv = [parser]
    exec(code, main.__dict__)


#: `_wait_for`: the shell reaped the tests before it became this script (they ended first)
_REAPED = object()


def _wait_for(pid, deadline):
    """The wait status of child PID (the tests, a parser), `_REAPED`, or None once `deadline` (time.monotonic()) has passed. SIGCHLD is
    blocked and waited for (no polling, no handler that could fire at a bad moment), then the old mask
    restored."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        while True:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                return _REAPED
            if done:
                return status
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            signal.sigtimedwait([signal.SIGCHLD], left)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _kill_the_rest():
    """Kill every process the tests left: in the command's own pid namespace that is everything but this
    process and the namespace's init (twice: a process forking at the first pass is caught by the second)."""
    for _ in range(2):
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass


def _clear(path):
    """Nothing at `path` any more: a file or link the tests left there is removed, a directory (however deep,
    whatever its modes) moved aside under a name of its own."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError:
        os.rename(path, "%s.left-%d-%.6f" % (path, os.getpid(), time.time()))


def _regular_size(path):
    try:
        st = os.lstat(path)
    except OSError:
        return -1
    return st.st_size if (st.st_mode & 0o170000) == 0o100000 else -1


def _exit_code_file(path):
    """The exit code the tests' job wrote (`echo $? >RC`); None when it wrote none."""
    try:
        with open(path) as fh:
            return int(fh.read().strip())
    except (OSError, ValueError):
        return None


def after_tests(pid, t0, budget, log, status_path, cap, rc_path, parse_args):
    """`--after-tests`: the tests (PID, this process's child, started at T0 with BUDGET seconds) end, or are
    killed at the budget; everything they left is killed; then "exit-code t0 t1 log-bytes" goes to STATUS
    and, when the log is a regular file of at most CAP bytes, it is parsed (`parse`, with PARSE_ARGS). The
    exit code is PID's wait status, or, when the shell reaped PID before it became this script (quick tests
    on a busy machine), what PID wrote to RC_PATH. STATUS is written last before the parse: whatever fails
    before it, the host parses on its own (a failure of this script is never taken for the parser's)."""
    deadline = time.monotonic() + max(t0 + budget - time.time(), 0.0)
    status = _wait_for(pid, deadline)
    _kill_the_rest()
    if status is None:
        status = os.waitpid(pid, 0)[1]
    t1 = time.time()
    if status is _REAPED:
        rc = _exit_code_file(rc_path)
        if rc is None:  # the job was killed before it could write it: the host parses on its own
            sys.exit("the tests' exit code is unknown: the shell reaped them and they wrote none")
    else:
        rc = _exit_code(status)
    size = _regular_size(log)
    _clear(status_path)
    fd = os.open(status_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    os.write(fd, ("%d %.6f %.6f %d\n" % (rc, t0, t1, size)).encode())
    os.close(fd)
    if 0 <= size <= cap:
        parse(*parse_args)


def _exit_code(status):
    return 128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


#: bytes of the second run's stdout kept (`testrun.REPARSE_BYTES`: beyond this it is no JSON object anyway)
REPARSE_BYTES = 16 * 1024 * 1024


def parse(parser, log, seconds, limit, out2, rc2, flag, python):
    """Parse LOG (see the module docstring: PARSE). Never returns in this process: it exits with the parser's
    code, or 124 past the budget; the forked parser returns, as the parser's code, to the interpreter's
    own exit (so nothing between here and `main` may catch or clean up)."""
    seconds = max(min(float(seconds), float(limit) - time.time()), 0.0)
    deadline = time.monotonic() + seconds
    second = _spawn_second(python, parser, log, out2) if out2 != "-" else None
    first = _fork_parser(parser, log)
    if first == 0:
        return  # the parser, done: on to the interpreter's exit
    status = _wait_for(first, deadline)
    status2 = _wait_for(second, deadline) if second is not None and status is not None else None
    if status is None or (second is not None and status2 is None):
        _status(flag, "timeout")
        os._exit(124)  # the parsers, and what they left, die with the command
    if second is not None:
        _status(rc2, "%d" % _exit_code(status2))
    os._exit(_exit_code(status))


def _fork_parser(parser, log):
    """0 in a forked copy of this process that became the parser and ended; its pid in this one."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_the_parser(parser, log)
    return pid


def _spawn_second(python, parser, log, out):
    """A fresh `PYTHON PARSER <LOG >OUT 2>/dev/null` (an interpreter of its own, as a second run must be),
    its stdout cut at `REPARSE_BYTES` (a write past it fails), signals at their defaults."""
    pid = os.fork()
    if pid:
        return pid
    try:
        for fd, path, flags in ((0, log, os.O_RDONLY), (1, out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, os.devnull, os.O_WRONLY)):
            new = os.open(path, flags, 0o644)
            os.dup2(new, fd)
            os.close(new)
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
        cut = REPARSE_BYTES if hard == resource.RLIM_INFINITY else min(REPARSE_BYTES, hard)
        resource.setrlimit(resource.RLIMIT_FSIZE, (cut, hard))
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        os.execv(python, [python, parser])
    finally:
        os._exit(127)


def main():
    if sys.argv[1] == "--after-tests":
        pid, t0, budget, log, status_path, cap, rc_path = sys.argv[2:9]
        after_tests(int(pid), float(t0), float(budget), log, status_path, int(cap), rc_path, sys.argv[9:17])
        return
    if sys.argv[1] == "--parse":
        parse(*sys.argv[2:10])
        return
    parser, log, said_path, status_path, wait = sys.argv[1:6]
    said = _wait_for_signal(said_path, float(wait))
    if said != "go":
        _status(status_path, "nosignal" if said is None else "stopped")
        return
    _status(status_path, "started")
    _become_the_parser(parser, log)


if __name__ == "__main__":
    main()
