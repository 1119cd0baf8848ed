"""The `local` backend: a private, resettable copy of a local repository directory (SPEC §3).

Workspace
    The repository directory is copied *as the user has it* (uncommitted, untracked, generated and
    git-ignored files included) with `cp -a` into a per-process cache on a RAM-backed directory (/dev/shm,
    else the temp dir), once per repository state (`fingerprint`); each sandbox's workspace is a `cp -a` of
    that cache. Workspaces are real copies, never hard links, so no command can reach the user's files or
    the cache through them. Snapshots share unchanged files with hard links and `reset` copies back only
    what changed (see `_tree.py`: exact, cost = one walk + changed files).

    With bubblewrap, top-level git-ignored virtualenvs (a `pyvenv.cfg` inside), `.tox`, `.nox` and
    `node_modules` are not copied: the original is mounted read-only at the same place inside the sandbox,
    so commands see exactly the user's tree while workspace setup stays cheap. Without bubblewrap nothing
    is skipped.

Isolation (bubblewrap, when `bwrap` is installed and works)
    read-only view of the machine (`--ro-bind / /`), the workspace mounted read-write at the *original
    repository path* (editable installs of the original import the workspace's code; absolute paths keep
    working), a private /tmp per sandbox (PATH / VIRTUAL_ENV / PYTHONPATH entries under /tmp are mounted
    back read-only), private HOME and scratch directories, fresh /dev and /proc, new user, network, pid
    namespaces and session, all capabilities dropped, `--die-with-parent`. A command's processes all live in
    its pid namespace: when the command exits or times out, the namespace and everything in it dies.

    Without bubblewrap (or with `isolation="none"`), commands are plain subprocesses in their own session,
    at the workspace path (`root`). One warning is logged.

Import roots
    In both modes the repository's import roots (its root, `src/`, what its packaging declares; see
    `_imports.py`) under `root` come first on PYTHONPATH, so neither an editable install of the original
    nor a non-editable copy of the same package in site-packages shadows the workspace's code.

Limits
    rlimits set by a bash wrapper inside the sandbox: address space (`memory_mb`), processes (`pids`, set
    inside the user namespace so it counts only the sandbox's processes), file size, CPU seconds, no core
    dumps. uid 0 is exempt from RLIMIT_NPROC, so as root a pids cgroup (`_cgroup.py`) caps the process
    count when one can be created; the cgroup also lists every survivor to kill. Output is read from one
    pipe while the command runs, bounded by `OutputCapture` (head + tail).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Mapping

from ..errors import SandboxError
from . import _cgroup, _cleanup
from ._imports import import_roots
from ._repo import junk_dirs, local_fingerprint, status_entries
from ._tree import Tree, Workspace, force_rmtree, prepare_copy
from .base import (
    PRISTINE,
    TIMEOUT_EXIT_CODE,
    ExecResult,
    Limits,
    OutputCapture,
    Sandbox,
    SandboxOptions,
    decode_output,
    is_secret_name,
    sanitized_env,
)

log = logging.getLogger("ssrkit.sandbox")

_F_SETPIPE_SZ = 1031
_BASH = shutil.which("bash") or "/bin/bash"


# -- the per-process state: temp root, pristine caches --------------------------------------------------

def _tmp_root() -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def _sweep_stale_dirs(root: str) -> None:
    """Remove temp roots of ssrkit processes that died without cleaning up (SIGKILL, power loss)."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"ssrkit-(\d+)-[A-Za-z0-9_]+", name)
        if m and int(m.group(1)) != os.getpid() and not _cleanup.pid_alive(int(m.group(1))):
            try:
                force_rmtree(os.path.join(root, name))
            except OSError:
                pass


class _Session:
    """Per-process: one temp root and one pristine cache per (repository state, skipped dirs)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        root = _tmp_root()
        _sweep_stale_dirs(root)
        _cgroup.sweep_stale()
        self.base = tempfile.mkdtemp(prefix=f"ssrkit-{self.pid}-", dir=root)
        self.caches: dict[tuple[str, tuple[str, ...]], Tree] = {}
        self.lock = threading.Lock()
        _cleanup.add_hook(self.cleanup)

    def cache_for(self, src: str, fingerprint: str, skip: list[str]) -> Tree:
        key = (fingerprint, tuple(skip))
        with self.lock:
            tree = self.caches.get(key)
            if tree is None:
                dest = os.path.join(self.base, f"cache-{len(self.caches)}-{fingerprint[:12]}")
                try:
                    prepare_copy(src, dest, skip)
                    tree = Tree(dest, owned=False)
                except BaseException:
                    force_rmtree(dest)
                    raise
                self.caches[key] = tree
            return tree

    def cleanup(self) -> None:
        if os.getpid() != self.pid:
            return
        force_rmtree(self.base)
        self.caches.clear()


_session_obj: _Session | None = None
_session_lock = threading.Lock()


def _session() -> _Session:
    global _session_obj
    with _session_lock:
        if _session_obj is None or _session_obj.pid != os.getpid() or not os.path.isdir(_session_obj.base):
            _session_obj = _Session()
        return _session_obj


# -- isolation probe -------------------------------------------------------------------------------------

_probe_lock = threading.Lock()
_probe_result: tuple[list[str] | None, str] | None = None
_warned: set[str] = set()


def _warn_once(key: str, msg: str, *args) -> None:
    if key not in _warned:
        _warned.add(key)
        log.warning(msg, *args)


def bwrap_flags() -> tuple[list[str] | None, str]:
    """(namespace flags that work with this machine's bwrap, "") or (None, why bwrap is unusable). Cached."""
    global _probe_result
    with _probe_lock:
        if _probe_result is not None:
            return _probe_result
        exe = shutil.which("bwrap")
        if exe is None:
            _probe_result = (None, "bwrap is not installed (apt-get install bubblewrap)")
            return _probe_result
        base = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net",
                "--unshare-pid", "--die-with-parent", "--new-session"]
        why = ""
        for extra in (["--unshare-user", "--cap-drop", "ALL"], ["--unshare-user"], ["--cap-drop", "ALL"]):
            try:
                p = subprocess.run([*base, *extra, "true"], capture_output=True, text=True, timeout=20,
                                   errors="replace", cwd="/")
            except (OSError, subprocess.TimeoutExpired) as e:
                why = str(e)
                continue
            if p.returncode == 0:
                _probe_result = ([exe, *extra[:]], "")
                return _probe_result
            why = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
        _probe_result = (None, f"bwrap does not work here ({why})")
        return _probe_result


def isolation_available() -> str | None:
    """None when bubblewrap isolation works on this machine, else the reason."""
    flags, why = bwrap_flags()
    return None if flags is not None else why


# -- process helpers -------------------------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(process group, session) of `pid`; None when it is gone or a zombie (nothing left to kill)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    try:
        if rest[0] in (b"Z", b"X"):
            return None
        return int(rest[2]), int(rest[3])
    except (IndexError, ValueError):
        return None


def _scan_kill(leader: int, token: bytes, timeout: float = 3.0) -> None:
    """Without a pid namespace or cgroup: kill every process in the leader's group or session, or carrying
    the sandbox token in its environment (catches most processes that called setsid)."""
    me = os.getpid()
    deadline = time.monotonic() + timeout
    while True:
        victims = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == me:
                continue
            st = _proc_stat(pid)
            if st is None:
                continue
            hit = st[0] == leader or st[1] == leader
            if not hit:
                try:
                    with open(f"/proc/{pid}/environ", "rb") as fh:
                        hit = token in fh.read()
                except OSError:
                    pass
            if hit:
                victims.append(pid)
        if not victims or time.monotonic() > deadline:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.01)


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)  # Linux >= 5.3
    except (AttributeError, OSError):
        return None


_LIMITS_SCRIPT = (
    "ulimit -c 0 2>/dev/null; {lines}"
    'exec "$BASH" -c "$1"'
)


def _limits_script(limits: Limits) -> str:
    lines = [f"ulimit -f {int(limits.file_size_mb) * 1024} 2>/dev/null;",
             f"ulimit -v {int(limits.memory_mb) * 1024} 2>/dev/null;",
             f"ulimit -u {int(limits.pids)} 2>/dev/null;"]
    if limits.cpu_seconds:
        lines.append(f"ulimit -t {int(limits.cpu_seconds)} 2>/dev/null;")
    return _LIMITS_SCRIPT.format(lines=" ".join(lines) + " ")


def _tmp_rebinds(env: Mapping[str, str], repo: str) -> list[str]:
    """Toolchain directories under /tmp (hidden by the private /tmp) to mount back read-only."""
    cands: list[str] = []
    for var in ("PATH", "PYTHONPATH"):
        cands += [p for p in env.get(var, "").split(":") if p]
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME"):
        if env.get(var):
            cands.append(env[var])
    out: list[str] = []
    for c in cands:
        if not os.path.isabs(c):
            continue
        c = os.path.normpath(c)
        if os.path.basename(c) == "bin" and os.path.isfile(os.path.join(os.path.dirname(c), "pyvenv.cfg")):
            c = os.path.dirname(c)
        if not (c == "/tmp" or c.startswith("/tmp/")) or c == "/tmp" or not os.path.isdir(c):
            continue
        if c == repo or c.startswith(repo + "/"):
            continue
        if any(c == o or c.startswith(o + "/") for o in out):
            continue
        out = [o for o in out if not o.startswith(c + "/")] + [c]
    return out


# -- the sandbox -----------------------------------------------------------------------------------------

class LocalSandbox(Sandbox):
    """A private workspace of a local repository directory; see the module docstring."""

    backend = "local"

    def __init__(self, repo: str | os.PathLike, options: SandboxOptions | None = None, *,
                 isolation: str | None = None, fingerprint: str | None = None) -> None:
        self.options = options or SandboxOptions()
        self.limits = self.options.limits
        self.original = os.path.realpath(os.fspath(repo))
        if not os.path.isdir(self.original):
            raise SandboxError(f"repository {repo} does not exist or is not a directory")
        isolation = (isolation or os.environ.get("SSRKIT_LOCAL_ISOLATION") or "auto").lower()
        if isolation not in ("auto", "bwrap", "none"):
            raise SandboxError(f"unknown local isolation {isolation!r} (expected auto, bwrap or none)")
        self._bwrap: list[str] | None = None
        if isolation != "none":
            flags, why = bwrap_flags()
            if flags is None and isolation == "bwrap":
                raise SandboxError(f"bubblewrap isolation requested but {why}")
            if flags is None:
                _warn_once("nobwrap", "ssrkit: %s; local sandboxes run commands as plain subprocesses "
                           "without network or filesystem isolation", why)
            self._bwrap = flags
        self.isolated = self._bwrap is not None
        self._lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._closed = False
        self._token = uuid.uuid4().hex
        self._stdin_n = 0
        self._snapshots: dict[str, Tree] = {}
        self._owned: list[Tree] = []
        self._clean_tree = None
        self.cgroup: _cgroup.PidsCgroup | None = None

        sess = _session()
        self.dir = tempfile.mkdtemp(prefix="sb-", dir=sess.base)
        _cleanup.register(self)
        try:
            entries = status_entries(self.original)
            fp = fingerprint or local_fingerprint(self.original, entries)
            self.skipped = junk_dirs(self.original, entries) if self.isolated else []
            tree = sess.cache_for(self.original, fp, self.skipped)
            self.ws = Workspace(os.path.join(self.dir, "ws"), tree)
            # the tree the workspace is known to equal, while no command or write_file touched it
            self._clean_tree: Tree | None = tree
            for sub in ("scratch", "home", "tmp", "snaps", "io"):
                os.mkdir(os.path.join(self.dir, sub), 0o700)
            self.scratch = os.path.join(self.dir, "scratch")
            self.home = os.path.join(self.dir, "home")
            self.root = self.original if self.isolated else self.ws.path
            #: absolute in-sandbox directories put first on PYTHONPATH
            self.import_roots = [os.path.normpath(os.path.join(self.root, r)) for r in import_roots(self.ws.path)]
            self.cgroup = _cgroup.PidsCgroup.create(self.limits.pids)
            if self.cgroup is None and os.geteuid() == 0:
                _warn_once("nocgroup", "ssrkit: running as root and no pids cgroup can be created: "
                           "local sandboxes cannot contain a fork bomb (RLIMIT_NPROC does not apply to root)")
        except BaseException:
            self.close()
            raise

    # -- paths -------------------------------------------------------------------------------------------
    @property
    def workspace(self) -> str:
        """The workspace directory on the host (== `root` without bubblewrap)."""
        return self.ws.path

    def _host_path(self, path: str) -> str:
        """Host path of a sandbox path: relative to the root, or absolute under `root` or `scratch`."""
        ws = self.ws.path
        if os.path.isabs(path):
            p = os.path.normpath(path)
            if p == self.scratch or p.startswith(self.scratch + "/"):
                host, allowed = p, self.scratch
            elif p == self.root or p.startswith(self.root + "/"):
                host, allowed = ws + p[len(self.root):], ws
            else:
                raise SandboxError(f"{path} is neither under the repository root nor under the scratch dir")
        else:
            rel = os.path.normpath(path)
            if rel == ".." or rel.startswith("../"):
                raise SandboxError(f"{path} escapes the repository")
            host, allowed = os.path.join(ws, rel), ws
        real = os.path.realpath(host)
        real_allowed = os.path.realpath(allowed)
        if real != real_allowed and not real.startswith(real_allowed + "/"):
            raise SandboxError(f"{path} resolves outside the sandbox (through a symlink)")
        return host

    def write_file(self, path: str, data: bytes | str, mode: int | None = None) -> None:
        self._check_open()
        host = self._host_path(path)
        self._clean_tree = None
        os.makedirs(os.path.dirname(host), exist_ok=True)
        if isinstance(data, str):
            data = data.encode("utf-8")
        if os.path.islink(host):
            os.unlink(host)
        with open(host, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(host, mode)

    def read_file(self, path: str) -> bytes:
        self._check_open()
        host = self._host_path(path)
        with open(host, "rb") as fh:
            return fh.read()

    # -- snapshots ---------------------------------------------------------------------------------------
    def snapshot(self, name: str) -> None:
        with self._lock:
            self._check_open()
            tree = self._clean_tree
            if tree is None:
                dest = os.path.join(self.dir, "snaps", uuid.uuid4().hex[:12])
                try:
                    tree = self.ws.snapshot(dest)
                except OSError as e:  # e.g. a command made a directory unreadable (as a normal user)
                    force_rmtree(dest)
                    raise SandboxError(f"could not snapshot the workspace: {e}") from None
                if tree.path == dest:
                    self._owned.append(tree)
            self._snapshots[name] = tree
            self._clean_tree = tree
            self._gc()

    def reset(self, name: str = PRISTINE) -> None:
        with self._lock:
            self._check_open()
            tree = self._snapshots.get(name)
            if tree is None:
                known = ", ".join(sorted(self._snapshots)) or "none"
                raise SandboxError(f"no snapshot named {name!r} in this sandbox (known: {known})")
            if self._clean_tree is not tree:
                self.ws.reset(tree)
            self._clean_tree = tree
            self._gc()

    def _gc(self) -> None:
        live = {id(t) for t in self._snapshots.values()}
        live |= {id(m[2]) for m in self.ws.manifest.values()}
        keep = []
        for t in self._owned:
            if id(t) in live:
                keep.append(t)
            else:
                force_rmtree(t.path)
        self._owned = keep

    # -- commands ----------------------------------------------------------------------------------------
    def _env(self, extra: Mapping[str, str] | None) -> dict[str, str]:
        env = sanitized_env(extra=self.options.env)
        for k, v in (extra or {}).items():
            if not is_secret_name(k):
                env[k] = v
        env["HOME"] = self.home
        env["SSRKIT_SANDBOX"] = "local"
        if self.isolated:
            env["TMPDIR"] = "/tmp"
        else:
            env["TMPDIR"] = os.path.join(self.dir, "tmp")
            env["SSRKIT_SANDBOX_TOKEN"] = self._token
        front = self.import_roots
        rest = [p for p in env.get("PYTHONPATH", "").split(":") if p and p not in front]
        env["PYTHONPATH"] = ":".join(front + rest)
        return env

    def _resolve_cwd(self, cwd: str | None) -> str:
        if cwd is None:
            return self.root
        return os.path.normpath(cwd if os.path.isabs(cwd) else os.path.join(self.root, cwd))

    def _argv(self, command: str, cwd: str, env: Mapping[str, str]) -> list[str]:
        inner = [_BASH, "-c", _limits_script(self.limits), "ssrkit-sandbox", command]
        if self._bwrap is None:
            argv = inner
        else:
            b = [*self._bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                 "--bind", os.path.join(self.dir, "tmp"), "/tmp"]
            for d in _tmp_rebinds(env, self.original):
                b += ["--ro-bind", d, d]
            b += self._hide_flags()
            b += ["--bind", self.ws.path, self.original]
            for name in self.skipped:
                src = os.path.join(self.original, name)
                b += ["--ro-bind", src, src]
            b += ["--bind", self.scratch, self.scratch, "--bind", self.home, self.home]
            if not self.limits.network:
                b.append("--unshare-net")
            b += ["--unshare-pid", "--die-with-parent", "--new-session", "--chdir", cwd, "--"]
            argv = b + inner
        if self.cgroup is not None:
            argv = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', self.cgroup.procs_file, *argv]
        return argv

    def _hide_flags(self) -> list[str]:
        """Cover each `options.hide` path with an empty tmpfs (directory) or /dev/null (file).

        A path holding the repository, the sandbox's own directories or the toolchain is never hidden.
        """
        flags: list[str] = []
        keep = [self.original, self.dir, os.path.dirname(_BASH), os.path.realpath(sys.prefix), os.path.dirname(os.path.realpath(sys.executable))]
        for raw in self.options.hide:
            p = os.path.realpath(raw)
            if p == "/" or any(k == p or k.startswith(p.rstrip("/") + "/") for k in keep):
                _warn_once(f"hide:{p}", "ssrkit: not hiding %s from the sandbox: it holds the repository, the "
                           "sandbox or the toolchain", p)
                continue
            if os.path.isdir(p):
                flags += ["--tmpfs", p]
            elif os.path.exists(p):
                flags += ["--ro-bind", "/dev/null", p]
        return flags

    def run(self, command: str, *, timeout: float, env: Mapping[str, str] | None = None,
            stdin: bytes | str | None = None, cwd: str | None = None) -> ExecResult:
        with self._lock:
            self._check_open()
            return self._run(command, timeout=timeout, env=env, stdin=stdin, cwd=cwd)

    def _run(self, command, *, timeout, env, stdin, cwd) -> ExecResult:
        self._clean_tree = None
        full_env = self._env(env)
        in_cwd = self._resolve_cwd(cwd)
        if self.isolated:
            host_cwd = "/"
        else:
            host_cwd = in_cwd
            if not os.path.isdir(host_cwd):
                return ExecResult(1, f"ssrkit: working directory {cwd} does not exist\n", 0.0)
        argv = self._argv(command, in_cwd, full_env)
        stdin_path = None
        if stdin is not None:
            self._stdin_n += 1
            stdin_path = os.path.join(self.dir, "io", f"stdin-{self._stdin_n}")
            with open(stdin_path, "wb") as fh:
                fh.write(stdin.encode("utf-8") if isinstance(stdin, str) else stdin)
        cap = OutputCapture(self.limits.output_bytes)
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        stdin_f = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        start = time.monotonic()
        proc: subprocess.Popen | None = None
        pidfd = None
        timed_out = False
        try:
            try:
                proc = subprocess.Popen(argv, stdin=stdin_f, stdout=w, stderr=w, env=full_env, cwd=host_cwd,
                                        start_new_session=True, close_fds=True)
            except OSError as e:
                raise SandboxError(f"could not start a command in the local sandbox: {e}") from None
            finally:
                os.close(w)
                if stdin_path:
                    stdin_f.close()  # type: ignore[union-attr]
                    os.unlink(stdin_path)
            self._proc = proc
            pidfd = _pidfd(proc.pid)
            timed_out = self._pump(r, proc, pidfd, start + max(float(timeout), 0.0), cap)
            self._kill_tree(proc)
            self._drain(r, cap, 3.0)
        finally:
            if proc is not None:
                if proc.returncode is None:
                    self._kill_tree(proc)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
            if pidfd is not None:
                os.close(pidfd)
            os.close(r)
            self._proc = None
        seconds = time.monotonic() - start
        data, truncated = cap.result()
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        if rc < 0:
            rc = 128 - rc
        if timed_out:
            rc = TIMEOUT_EXIT_CODE
        return ExecResult(exit_code=rc, output=decode_output(data), seconds=seconds, timed_out=timed_out,
                          truncated=truncated)

    @staticmethod
    def _pump(r: int, proc: subprocess.Popen, pidfd: int | None, deadline: float, cap: OutputCapture) -> bool:
        """Read output until the main process exits (True if the deadline came first)."""
        poller = select.poll()
        poller.register(r, select.POLLIN | select.POLLHUP | select.POLLERR)
        if pidfd is not None:
            poller.register(pidfd, select.POLLIN)
        pipe_open = True
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return True
            wait = remaining if pidfd is not None else min(remaining, 0.02)
            try:
                events = poller.poll(max(int(wait * 1000), 1) if wait < 3600 else 3600_000)
            except InterruptedError:
                continue
            exited = False
            for fd, _ev in events:
                if fd == r:
                    try:
                        data = os.read(r, 1 << 20)
                    except BlockingIOError:
                        continue
                    if data:
                        cap.feed(data)
                    else:
                        pipe_open = False
                        poller.unregister(r)
                elif fd == pidfd:
                    exited = True
            if pidfd is None and proc.poll() is not None:
                exited = True
            if exited:
                return False
            if not pipe_open and pidfd is None:
                # no pidfd: wait for the exit without busy looping
                try:
                    proc.wait(timeout=max(deadline - time.monotonic(), 0))
                    return False
                except subprocess.TimeoutExpired:
                    return True

    @staticmethod
    def _drain(r: int, cap: OutputCapture, timeout: float) -> None:
        """Read what is left in the pipe after every writer was killed (bounded)."""
        os.set_blocking(r, False)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = os.read(r, 1 << 20)
            except BlockingIOError:
                ready, _, _ = select.select([r], [], [], max(deadline - time.monotonic(), 0))
                if not ready:
                    return
                continue
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                return
            if not data:
                return
            cap.feed(data)

    def _kill_tree(self, proc: subprocess.Popen) -> None:
        """Kill everything the command started (its group, its pid namespace, its cgroup, its session)."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.cgroup is not None:
            self.cgroup.kill_all()
        elif self._bwrap is None:
            _scan_kill(proc.pid, f"SSRKIT_SANDBOX_TOKEN={self._token}".encode())

    # -- lifetime ----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox is closed")

    def close(self) -> None:
        with self._state_lock:
            if self._closed:
                return
            self._closed = True
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._kill_tree(proc)
        with self._lock:  # waits for a running command to notice its death
            if self.cgroup is not None:
                self.cgroup.remove()
                self.cgroup = None
            self._snapshots.clear()
            self._owned.clear()
            force_rmtree(self.dir)
        _cleanup.unregister(self)

    def __repr__(self) -> str:
        iso = "bwrap" if self.isolated else "none"
        return f"<LocalSandbox {self.original} isolation={iso} dir={self.dir}>"


def pristine_cache_dir() -> Path:
    """The per-process directory holding pristine caches and workspaces (for diagnostics and tests)."""
    return Path(_session().base)
