"""Process-wide cleanup of sandboxes: at interpreter exit, on Ctrl-C and on SIGTERM/SIGHUP.

Every backend registers each sandbox it opens; `close_all()` runs from `atexit`. SIGTERM and SIGHUP (whose
default action would end the interpreter without running `atexit`) are turned into `SystemExit` when no one
else handles them, so `kill PID` also removes containers and temporary directories. Ctrl-C raises
KeyboardInterrupt, which unwinds through the sandboxes' `finally` blocks and then reaches `atexit`.
A forked child starts with an empty registry: it never closes its parent's sandboxes.

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
_owner = os.getpid()


def _forget_in_child() -> None:
    global _owner
    _owner = os.getpid()  # the run id is inherited: a forked child works for the same run
    _live.clear()
    _hooks.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def register(obj: _Closable) -> None:
    with _lock:
        _live[id(obj)] = obj
    _install()


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
    raise SystemExit(128 + signum)


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
    atexit.register(close_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                if signal.getsignal(sig) in (signal.SIG_DFL, None):
                    signal.signal(sig, _on_signal)
            except (ValueError, OSError):  # not the main interpreter, or unsupported
                pass


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
