"""Process-wide cleanup of sandboxes: at interpreter exit, on Ctrl-C and on SIGTERM/SIGHUP.

Every backend registers each sandbox it opens; `close_all()` runs from `atexit`. SIGTERM and SIGHUP (whose
default action would end the interpreter without running `atexit`) are turned into `SystemExit(128 + N)`
when no one else handles them, so `kill PID` also removes containers and temporary directories. Ctrl-C
raises KeyboardInterrupt, which unwinds through the sandboxes' `finally` blocks and then reaches `atexit`.
A forked child starts with an empty registry: it never closes its parent's sandboxes.

A signal reaches the main thread only, while `--jobs` workers run units in sandboxes of their own, and the
interpreter waits for them before `atexit`: so the handler also *stops* the process (`stop`): no sandbox
opens and no command starts from then on (`Interrupted`, a KeyboardInterrupt, in whichever thread asks),
and a thread of its own closes every live sandbox at once (their commands killed), so each worker ends its
unit at its next step, as the main thread does, without writing a verdict of a killed run. The command line
installs the handlers from its main thread before anything else (`install_signal_handlers`), Ctrl-C's too;
a library user's process gets SIGTERM's and SIGHUP's when it opens its first sandbox from the main thread.

Every sandbox is labelled with its *run* (`run_id()`): a Docker container with `ssrkit.run`, a local
sandbox with its `label.json`. A run is one command on its driver; under `--executor ray` each task sets the
driver's run id in the node's worker process, so `reap.py` can remove a whole run's sandboxes on every node.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import threading
import uuid
from typing import Protocol

log = logging.getLogger("ssrkit.sandbox")


class _Closable(Protocol):
    def close(self) -> None: ...


_lock = threading.RLock()
_live: dict[int, _Closable] = {}
_hooks: list = []  # extra callables run after the sandboxes are closed (temp roots, cgroups)
_installed = False
_handlers = False  # the signal handlers are installed (from the main thread)
_owner = os.getpid()
#: the signal that stopped the process (`stop`), else None
_stopped: int | None = None
#: the thread that closes the live sandboxes once `_go` is set (started ahead: a signal handler that starts
#: a thread could wait for a lock the code it interrupted holds)
_closer: threading.Thread | None = None
_go = threading.Event()


class Interrupted(KeyboardInterrupt):
    """The process is stopping (Ctrl-C, SIGTERM, SIGHUP): no sandbox opens and no command runs any more."""


def _forget_in_child() -> None:
    global _owner, _stopped, _closer
    _owner = os.getpid()  # the run id is inherited: a forked child works for the same run
    _live.clear()
    _hooks.clear()
    _stopped, _closer = None, None
    _go.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def register(obj: _Closable) -> None:
    with _lock:
        check_running()
        _live[id(obj)] = obj
    _install()


def check_running() -> None:
    """Raise `Interrupted` once the process is stopping: what a sandbox does before it opens or runs."""
    if _stopped is not None:
        raise Interrupted(f"ssrkit is stopping (signal {_stopped})")


def stopped() -> int | None:
    """The signal that stopped this process (`stop`), else None."""
    return _stopped


def stop(signum: int) -> None:
    """Stop the process: refuse every sandbox and command from now on, and close the live sandboxes now, from
    a thread of its own (the caller, a signal handler, may have interrupted the main thread inside one)."""
    global _stopped
    if _stopped is not None or os.getpid() != _owner:
        return
    _stopped = signum
    if _closer is None:
        _start_closer()
    _go.set()


def _start_closer() -> None:
    global _closer
    _closer = threading.Thread(target=_close_live, name="ssrkit-stop", daemon=True)
    _closer.start()


def _close_live() -> None:
    _go.wait()
    with _lock:
        objs = list(_live.values())
    for obj in objs:
        try:
            obj.close()
        except BaseException as e:  # noqa: BLE001 - cleanup must go on
            log.debug("closing %r failed: %s", obj, e)


def unregister(obj: _Closable) -> None:
    with _lock:
        _live.pop(id(obj), None)


def add_hook(fn) -> None:
    with _lock:
        if fn not in _hooks:
            _hooks.append(fn)
    _install()


def close_all() -> None:
    if os.getpid() != _owner:
        return  # a forked child must never tear down its parent's sandboxes
    closer = _closer
    if _stopped is not None and closer is not None and closer is not threading.current_thread():
        closer.join(60)  # the hooks remove what the sandboxes stand on: after them
    with _lock:
        objs = list(_live.values())
        hooks = list(_hooks)
    for obj in objs:
        try:
            obj.close()
        except BaseException as e:  # noqa: BLE001 - cleanup must go on
            log.debug("closing %r failed: %s", obj, e)
    for fn in hooks:
        try:
            fn()
        except BaseException as e:  # noqa: BLE001
            log.debug("cleanup hook %r failed: %s", fn, e)


def _on_signal(signum, frame):  # noqa: ARG001
    stop(signum)
    raise SystemExit(128 + signum)


def _on_sigint(signum, frame):  # noqa: ARG001
    stop(signum)
    raise KeyboardInterrupt


def install_signal_handlers(*, sigint: bool = False) -> None:
    """From the main thread: SIGTERM and SIGHUP (and Ctrl-C's SIGINT with `sigint`) stop the process
    (`stop`) and unwind its main thread, where no one else handles them. A no-op in other threads."""
    global _handlers
    if threading.current_thread() is not threading.main_thread():
        return
    mine = [(signal.SIGTERM, _on_signal, (signal.SIG_DFL, None)), (signal.SIGHUP, _on_signal, (signal.SIG_DFL, None))]
    if sigint:
        mine.append((signal.SIGINT, _on_sigint, (signal.default_int_handler, signal.SIG_DFL, None)))
    if _closer is None:
        _start_closer()
    for sig, handler, defaults in mine:
        try:
            if signal.getsignal(sig) in defaults:
                signal.signal(sig, handler)
        except (ValueError, OSError):  # not the main interpreter, or unsupported
            pass
    _handlers = True


def _install() -> None:
    global _installed
    with _lock:
        first = not _installed
        _installed = True
    if first:
        atexit.register(close_all)
    if not _handlers:  # a sandbox first opened by a worker thread: the main thread's next one installs them
        install_signal_handlers()


#: set it to name the run yourself (a Slurm job id, a Kubernetes job name); else each process is its own run
RUN_ENV = "SSRKIT_RUN"
_RUN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_run: str | None = None


def check_run_id(run: str) -> str:
    from ..errors import SsrkitError

    if not _RUN_RE.fullmatch(run):
        raise SsrkitError(f"run id {run!r} (${RUN_ENV}): use 1-64 letters, digits, '_', '.' or '-'")
    return run


def run_id() -> str:
    """The run this process's sandboxes belong to: the one set by `set_run_id`, else $SSRKIT_RUN, else a
    fresh id for this process."""
    global _run
    with _lock:
        if _run is None:
            env = os.environ.get(RUN_ENV, "").strip()
            _run = check_run_id(env) if env else uuid.uuid4().hex[:16]
        return _run


def set_run_id(run: str) -> None:
    """Label the sandboxes this process opens from now on with `run` (a Ray task sets its driver's)."""
    global _run
    with _lock:
        _run = check_run_id(run)


def pid_alive(pid: int) -> bool:
    """Whether process `pid` exists (it may belong to another user): stale leftovers are those it doesn't."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_names(root: str, pattern: str) -> list[str]:
    """Names in directory `root` matching `pattern` (its first group a pid) whose process is gone (not us)."""
    import re

    try:
        names = os.listdir(root)
    except OSError:
        return []
    out = []
    for name in names:
        m = re.fullmatch(pattern, name)
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            out.append(name)
    return out
