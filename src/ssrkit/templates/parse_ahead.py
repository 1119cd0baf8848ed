"""Run test_parser.py on a log that does not exist yet, with the interpreter already started.

ssrkit starts this script (`python3 parse_ahead.py PARSER LOG SIGNAL STATUS WAIT`, from the parser's own
directory) in the clean sandbox while the tests run in another one, so the ~15 ms of Python's start-up and
the sandbox's own start are paid while the tests run, not after them. It waits (inotify, else polling) for
the host to write SIGNAL: `go` once LOG holds the whole log, `stop` when there is nothing to parse. On `go`
it writes `started` to STATUS and becomes the parser, as `python3 PARSER <LOG` would run: its code in a
fresh `__main__` module (`__file__`, a source loader, no package), `sys.argv = [PARSER]`, the same
`sys.path` (this script lives in the parser's directory), the log on stdin and fd 0, and the interpreter's
own exit, so the exit code is the parser's. The parser's time limit is the host's to keep (it kills the
command). After WAIT seconds without a signal it gives up (`nosignal` in STATUS).

What this script needs besides `json` and `re` is imported from the standard library alone and forgotten
before the parser runs, so a module of the repository's with the same name (the repository is on
PYTHONPATH) neither breaks this script nor is hidden from the parser. `json` and `re` are imported ahead
as the parser would find them. Standard library only: ssrkit is not installed where it runs.
"""

import os
import sys
import time

import json  # noqa: F401,E402  ahead of the parser, found as it would find them (most parsers import them)
import re  # noqa: F401,E402

_FULL_PATH = sys.path[:]
_BEFORE = set(sys.modules)
sys.path[:] = [p for p in _FULL_PATH if p.startswith((sys.base_prefix, sys.base_exec_prefix))
               and "site-packages" not in p and "dist-packages" not in p]
try:
    import select

    try:
        import ctypes
    except ImportError:
        ctypes = None
finally:
    sys.path[:] = _FULL_PATH
_MINE = set(sys.modules) - _BEFORE  # forgotten in the child: the parser finds its own


def _inotify(directory):
    """A descriptor that becomes readable when a file in `directory` is written, or None."""
    if ctypes is None:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
        if fd < 0:
            return None
        if libc.inotify_add_watch(fd, os.fsencode(directory), 0x8 | 0x80) < 0:  # IN_CLOSE_WRITE | IN_MOVED_TO
            os.close(fd)
            return None
        return fd
    except (OSError, AttributeError, TypeError):
        return None


def _wait_for_signal(path, wait):
    deadline = time.monotonic() + wait
    watch = _inotify(os.path.dirname(os.path.abspath(path)))
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
        if watch is None:
            time.sleep(min(0.002, left))
            continue
        if select.select([watch], [], [], min(left, 1.0))[0]:
            try:
                os.read(watch, 65536)
            except OSError:
                pass


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


def main():
    parser, log, said_path, status_path, wait = sys.argv[1:6]
    said = _wait_for_signal(said_path, float(wait))
    if said != "go":
        _status(status_path, "nosignal" if said is None else "stopped")
        return
    _status(status_path, "started")
    _become_the_parser(parser, log)


if __name__ == "__main__":
    main()
