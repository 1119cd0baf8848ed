"""Run test_parser.py on a log that does not exist yet, with the interpreter already started.

ssrkit starts this script (`python3 parse_ahead.py PARSER LOG SIGNAL STATUS LIMIT WAIT`) in the clean
sandbox while the tests run in another one, so the ~15 ms of Python's start-up and the sandbox's own start
are paid while the tests run, not after them. It waits for the host to write SIGNAL: `go` once LOG holds the
whole log, `stop` when there is nothing to parse. Then a forked child runs the parser as `python3 PARSER
<LOG` would (`sys.argv`, `sys.path[0]` = the parser's directory, `__main__`, the log on stdin and on fd 0),
and this process waits at most LIMIT seconds for it: past that it kills the child's process group and
writes `timeout` to STATUS. Its exit code is the parser's (128 + N for a signal). After WAIT seconds without
a signal it gives up (exit 0, `nosignal` in STATUS).

Standard library only: it runs on the sandbox's interpreter, where ssrkit is not installed.
"""

import atexit
import json  # noqa: F401  imported ahead: most parsers import these, found as they would be
import os
import re  # noqa: F401
import runpy
import select
import signal
import sys
import time


def _wait_for_signal(path, wait):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            with open(path) as fh:
                said = fh.read().strip()
        except OSError:
            said = ""
        if said in ("go", "stop"):
            return said
        time.sleep(0.001)
    return None


def _status(path, word):
    with open(path, "w") as fh:
        fh.write(word)


def _child(parser, log):
    """Run the parser as a script; exit without the interpreter's teardown (a few ms per interpreter), once
    what a normal exit does for a script's output is done: atexit functions, then stdout and stderr flushed."""
    os.setpgid(0, 0)
    fd = os.open(log, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    sys.argv = [parser]
    sys.path[0] = os.path.dirname(os.path.abspath(parser))
    code = 0
    try:
        runpy.run_path(parser, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e.code)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                code = code or 120  # as Python exits when flushing stdout fails
        os._exit(code)


def _exit_code(code):
    """The exit code `sys.exit(code)` gives a script (a message is printed to stderr, and exits 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _wait(pid, limit):
    """The child's exit status, or None after `limit` seconds (the child's group is killed then)."""
    deadline = time.monotonic() + limit
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    while True:
        left = deadline - time.monotonic()
        if pidfd is not None:
            ready, _, _ = select.select([pidfd], [], [], max(left, 0))
            if not ready:
                break
        else:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status
            if left <= 0:
                break
            time.sleep(min(0.002, left))
            continue
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
    for target in (-pid, pid):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    os.waitpid(pid, 0)
    return None


def main():
    parser, log, said_path, status_path, limit, wait = sys.argv[1:7]
    said = _wait_for_signal(said_path, float(wait))
    if said != "go":
        _status(status_path, "nosignal" if said is None else "stopped")
        return 0
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        _child(parser, log)
    status = _wait(pid, float(limit))
    if status is None:
        _status(status_path, "timeout")
        return 124
    _status(status_path, "done")
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    os._exit(main())  # nothing of this process needs a teardown
