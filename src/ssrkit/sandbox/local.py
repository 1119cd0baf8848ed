"""The `local` backend: a private, resettable copy of a local repository directory (SPEC §3).

Workspace
    The repository directory is copied *as the user has it* (uncommitted, untracked, generated and
    git-ignored files included) with `cp -a` into a per-process cache on a RAM-backed directory (/dev/shm,
    else the temp dir), once per repository state (`fingerprint`). Where this process may mount overlays
    (`_overlay.py`, probed once; as root), each sandbox's workspace is an overlay mount with that cache as
    the read-only lower layer and a private upper layer: a reset clears the upper layer, a snapshot copies
    it alone (cost = what changed). Elsewhere (or with SSRKIT_LOCAL_WORKSPACE=copy) each workspace is a
    `cp -a` of the cache, real copies, never hard links, so no command can reach the user's files or the
    cache through them; snapshots share unchanged files with hard links and `reset` copies back only what
    changed (see `_tree.py`: exact, cost = one walk + changed files). `isolation["workspace"]` says which.
    The process's first sandbox starts a guardian (`_guardian.py`) that removes the temp root, its mounts
    and the sandboxes' cgroups the moment the process dies without its cleanup (SIGKILL).

    With bubblewrap, top-level git-ignored virtualenvs (a `pyvenv.cfg` inside), `.tox`, `.nox` and
    `node_modules` are not copied: the original is mounted read-only at the same place inside the sandbox,
    so commands see exactly the user's tree while workspace setup stays cheap. Without bubblewrap nothing
    is skipped.

Isolation (bubblewrap, when `bwrap` is installed and works)
    The view is built from an allow-list, read-only: the system's toolchain directories (`SYSTEM_ROOTS`:
    /usr, /etc, /opt …) and the toolchain directories the environment names (`toolchain_dirs`: venvs,
    conda, pyenv, editable installs, ssrkit's own interpreter); files under /etc that other users may not
    read (/etc/shadow, private keys) are covered. Nothing else of the machine exists inside: no /run or
    /var (so no host unix socket), no /home or /root (the invoking user's HOME), no other workspace. The
    workspace is mounted read-write at the *original repository path* (editable installs of the original
    import the workspace's code; absolute paths keep working), with private /tmp (= /var/tmp), HOME and
    scratch directories; HOME and /tmp are emptied by every `reset`. Fresh /dev and /proc, new user,
    network and pid namespaces and session, all capabilities dropped, `--die-with-parent`, the root
    read-only. `SandboxOptions.hide` paths outside the view need nothing (they leave no trace in
    /proc/self/mountinfo); inside it they are covered by an empty tmpfs or /dev/null. A command's processes
    all live in its pid namespace: when the command exits or times out, everything in it dies.

    Without bubblewrap (or with `isolation="none"`), commands are plain subprocesses in their own session,
    at the workspace path (`root`), with its import roots first on PYTHONPATH (below); in their own pid
    namespace and /proc via `unshare` where that works (as root, or with user namespaces). One warning says
    exactly what is not isolated (`not_isolated`).

Import roots
    In both modes the repository's import roots (its root, `src/`, what its packaging declares; see
    `_imports.py`) under `root` come first on PYTHONPATH, so neither an editable install of the original
    nor a non-editable copy of the same package in site-packages shadows the workspace's code.

Limits
    rlimits set by a bash wrapper inside the sandbox: address space (`memory_mb`), processes (`pids`, set
    inside the user namespace so it counts only the sandbox's processes), file size, CPU seconds, no core
    dumps. Where the machine allows, each sandbox also gets cgroups (`_cgroup.py`): pids (uid 0 is exempt
    from RLIMIT_NPROC) and memory — `memory_mb` for the whole process tree, RAM-backed files it writes to
    HOME, /tmp and the workspace included; the cgroups also list every survivor to kill. Under bubblewrap
    with cgroups a command starts in a sandbox that was started while the previous command ran
    (`_prestart.py`: a cgroup join waits for an RCU grace period, bubblewrap's start costs 8-10 ms, and
    both are paid ahead; a reset discards it, as it shows the workspace before the reset). Output is read
    from one pipe while the command runs, bounded by `OutputCapture` (head + tail). `isolation` reports
    what is in force.
"""

from __future__ import annotations

import errno
import fcntl
import glob
import json
import logging
import os
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Mapping, Sequence

from ..errors import SandboxError
from . import _cgroup, _cleanup
from ._imports import import_roots
from ._repo import junk_dirs, local_fingerprint, status_entries
from ._overlay import OverlayWorkspace, overlay_available, sweep_mounts
from ._prestart import Ahead, Prestarted, signals_as_alone
from ._procfs import stat_fields
from ._etcview import EtcView
from ._tree import Tree, Workspace, force_rmtree, prepare_copy
from .base import PRISTINE, ExecResult, FileTooLargeError, Limits, Sandbox, SandboxOptions
from .capture import TIMEOUT_EXIT_CODE, OutputCapture, decode_output
from .env import is_secret_name, sanitized_env

log = logging.getLogger("ssrkit.sandbox")

_F_SETPIPE_SZ = 1031
_HAS_RUN_TOOLS = all(shutil.which(t) for t in ("head", "date"))
_BASH = shutil.which("bash") or "/bin/bash"


# -- the per-process state: temp root, pristine caches --------------------------------------------------

def _tmp_root() -> str:
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return tempfile.gettempdir()


def _sweep_stale_dirs(root: str) -> None:
    """Remove temp roots of ssrkit processes that died without cleaning up (SIGKILL, power loss)."""
    for name in _cleanup.stale_names(root, r"ssrkit-(\d+)-[A-Za-z0-9_]+"):
        sweep_mounts(os.path.join(root, name))  # overlay workspaces of a process killed by SIGKILL
        try:
            force_rmtree(os.path.join(root, name))
        except OSError:
            pass


def _start_guardian(root: str, prefix: str) -> int | None:
    """Start `_guardian.py` for this process (see there): its pid, or None where it could not start (the
    next ssrkit process's sweep is then all there is)."""
    parents = [d for d in (_cgroup.parent_dir("pids"), _cgroup.parent_dir("memory")) if d]
    argv = [sys.executable, "-I", "-S", os.path.join(os.path.dirname(__file__), "_guardian.py"),
            str(os.getpid()), root, prefix, *dict.fromkeys(parents)]
    null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_RDWR, 0) for fd in (0, 1, 2)]
    # closed in the spawn, not only by the guardian once it runs: until then (a loaded machine: a while) it
    # would hold a pipe a caller of ssrkit waits on
    inherited = [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()]
    for actions in (null + inherited, null):  # an fd closed meanwhile by another thread: the guardian closes the rest
        try:
            return os.posix_spawn(sys.executable, argv, {}, file_actions=actions, setsid=True)
        except (OSError, AttributeError, TypeError) as e:
            why = e
    log.debug("no guardian for the local sandboxes: %s", why)
    return None


def _inheritable_fds() -> list[int]:
    """This process's descriptors above stderr that a child would inherit (a caller's pipe, say)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    fds = []
    for fd in (int(n) for n in names if n.isdigit() and int(n) > 2):
        try:
            if os.get_inheritable(fd):
                fds.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            pass
    return fds


#: (owner pid, temp root, guardian pid) of this process's guardian (`_guardian_for`)
_guardian: tuple[int, str, int] | None = None
_guardian_lock = threading.Lock()


def _guardian_for(root: str, prefix: str) -> int | None:
    """This process's guardian: started once, and again only where it has died (killed on its own: the
    process's next sandbox is guarded again), never one more per session (a session is made again after a
    cleanup: each would have left a guardian asleep until the process ends)."""
    global _guardian
    with _guardian_lock:
        g = _guardian
        if g is not None and g[:2] == (os.getpid(), root) and _running_child(g[2]):
            return g[2]
        pid = _start_guardian(root, prefix)
        _guardian = (os.getpid(), root, pid) if pid else None
        return pid


def _running_child(pid: int) -> bool:
    """Whether `pid`, a child of this process, still runs (a child that ended is reaped here)."""
    try:
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:  # not this process's child (a forked copy of the one that started it)
        return False


#: in each local sandbox's directory: its run, process and cgroups, for `reap.py`
LABEL = "label.json"


def write_label(sandbox_dir: str, cgroup: "_cgroup.SandboxCgroup | None" = None) -> None:
    label = {"run": _cleanup.run_id(), "pid": os.getpid(),
             "cgroups": cgroup.paths if cgroup else [], "controllers": cgroup.controllers if cgroup else []}
    with open(os.path.join(sandbox_dir, LABEL), "w", encoding="utf-8") as fh:
        json.dump(label, fh)


class _Session:
    """Per-process: one temp root and one pristine cache per (repository state, skipped dirs)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        root = _tmp_root()
        _sweep_stale_dirs(root)
        _cgroup.sweep_stale()
        prefix = f"ssrkit-{self.pid}-"  # the temp root's and the cgroups' (`_cgroup.SandboxCgroup.create`)
        self.root, self.prefix = root, prefix
        self.guardian = _guardian_for(root, prefix)  # first: whatever is made from here on dies with us
        self.base = tempfile.mkdtemp(prefix=prefix, dir=root)
        self.caches: dict[tuple[str, tuple[str, ...]], Tree] = {}
        self.lock = threading.Lock()
        self.etc = EtcView(os.path.join(self.base, "etc"))
        _cleanup.add_hook(self.cleanup)

    def guard(self) -> None:
        """Make sure the guardian runs (it may have been killed since), before a sandbox is made."""
        self.guardian = _guardian_for(self.root, self.prefix)

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
        self.etc.wait(10)  # its tar writes under base
        sweep_mounts(self.base)
        force_rmtree(self.base)
        self.caches.clear()

    def workspace_kind(self) -> tuple[str, str]:
        """("overlay", "") when workspaces are overlay mounts of the caches here, else ("copy", why).
        SSRKIT_LOCAL_WORKSPACE=copy|overlay|auto (default auto) forces one."""
        want = (os.environ.get("SSRKIT_LOCAL_WORKSPACE") or "auto").lower()
        if want not in ("auto", "copy", "overlay"):
            raise SandboxError(f"unknown SSRKIT_LOCAL_WORKSPACE {want!r} (expected auto, copy or overlay)")
        if want == "copy":
            return "copy", "SSRKIT_LOCAL_WORKSPACE=copy"
        ok, why = overlay_available(self.base)
        if not ok and want == "overlay":
            raise SandboxError(f"overlay workspaces requested (SSRKIT_LOCAL_WORKSPACE=overlay) but {why}")
        if ok:
            _info_once("ws:overlay", "ssrkit: local workspaces are overlay mounts of a RAM copy of the repository")
            return "overlay", ""
        _info_once("ws:copy", "ssrkit: local workspaces are copies: %s", why)
        return "copy", why


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


def _info_once(key: str, msg: str, *args) -> None:
    if key not in _warned:
        _warned.add(key)
        log.info(msg, *args)


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


_unshare_result: list[str] | None = None


def unshare_flags() -> list[str]:
    """`unshare` flags that give a command its own pid namespace and /proc without bubblewrap (other
    processes, ssrkit's own environment among them, are then invisible, and killing the namespace's first
    process kills all of it); [] where that is impossible. Cached."""
    global _unshare_result
    with _probe_lock:
        if _unshare_result is not None:
            return _unshare_result
        _unshare_result = []
        exe = shutil.which("unshare")
        if exe is None:
            return _unshare_result
        base = ["--pid", "--fork", "--kill-child", "--mount-proc"]
        for extra in ([] if os.geteuid() == 0 else ["--user", "--map-current-user"],):
            flags = [exe, *extra, *base]
            try:
                p = subprocess.run([*flags, "true"], capture_output=True, timeout=20, cwd="/")
            except (OSError, subprocess.TimeoutExpired):
                continue
            if p.returncode == 0:
                _unshare_result = flags
                break
        return _unshare_result


def isolation_available() -> str | None:
    """None when bubblewrap isolation works on this machine, else the reason."""
    flags, why = bwrap_flags()
    return None if flags is not None else why


# -- process helpers -------------------------------------------------------------------------------------

def _proc_stat(pid: int) -> tuple[int, int] | None:
    """(process group, session) of `pid`; None when it is gone or a zombie (nothing left to kill)."""
    rest = stat_fields(pid)
    if rest is None:
        return None
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


_DASH = shutil.which("dash")


def _limits_script(limits: Limits, *, init: bool = False) -> tuple[str, str]:
    """(shell, script): the rlimits, then `exec bash -c "$1"` (the command). With `init` (the shell is the
    first process of a pid namespace: `unshare`) the command is its child instead: a namespace's init
    ignores every signal it has no handler for, so a command that kills itself (`kill -SEGV $$`) would
    live on and report success; as the child it dies as anywhere, and the shell exits with 128 + signal."""
    shell, ulimits = _rlimits(limits)
    return shell, ulimits + f' {"" if init else "exec "}{_BASH} -c "$1"'


def _rlimits(limits: Limits) -> tuple[str, str]:
    """(shell, the `ulimit` lines of `limits` in that shell's words). The limits are set by dash where it is
    installed (it starts in a tenth of bash's time), by bash otherwise; the units differ (dash counts file
    sizes in 512-byte blocks and processes with -p)."""
    dash = _DASH is not None
    kb = 2 if dash else 1  # blocks per KiB for `ulimit -f`
    lines = ["ulimit -c 0 2>/dev/null;",
             f"ulimit -f {int(limits.file_size_mb) * 1024 * kb} 2>/dev/null;",
             f"ulimit -v {int(limits.memory_mb) * 1024} 2>/dev/null;",
             f"ulimit -{'p' if dash else 'u'} {int(limits.pids)} 2>/dev/null;"]
    if limits.cpu_seconds:
        lines.append(f"ulimit -t {int(limits.cpu_seconds)} 2>/dev/null;")
    return (_DASH if dash else _BASH), " ".join(lines)


#: what a bubblewrap sandbox sees of the machine, read-only: the system's toolchain directories (and, added
#: per command, the toolchain directories named by its environment). Nothing else of the host exists there:
#: no /run, /var, /home or /root, so no host socket, no user's files, no other workspace or artifact.
SYSTEM_ROOTS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix", "/gnu",
                "/sys")
_TOOL_VARS = ("VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONHOME", "JAVA_HOME", "GOROOT", "GOPATH", "CARGO_HOME",
              "RUSTUP_HOME")
_PATH_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _python_prefixes(d: str, seen: list[str]) -> list[str]:
    """Prefixes of the interpreters in bin directory `d` (a venv's `python` links to its base install).
    `seen`: the paths whose change could change the answer (`toolchain_dirs`' stamp)."""
    out = []
    seen.append(d)
    try:
        names = [n for n in os.listdir(d) if n.startswith("python")]
    except OSError:
        return out
    for n in names:
        real = os.path.realpath(os.path.join(d, n))
        if os.path.isfile(real):
            out.append(os.path.dirname(os.path.dirname(real)))
    return out


def _venv_extras(venv: str, seen: list[str]) -> list[str]:
    """Directories a virtualenv needs besides itself: its base interpreter, and what its .pth files and
    editable-install finders point to. `seen`: as in `_python_prefixes`."""
    out = []
    seen += [os.path.join(venv, "pyvenv.cfg"), os.path.join(venv, "lib")]
    try:
        with open(os.path.join(venv, "pyvenv.cfg"), encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, _, value = line.partition("=")
                if key.strip() == "home" and os.path.isabs(value.strip()):
                    out.append(os.path.dirname(value.strip()))
    except OSError:
        pass
    for sp in glob.glob(os.path.join(venv, "lib", "python*", "site-packages")):
        seen += [os.path.dirname(sp), sp]
        for f in glob.glob(os.path.join(sp, "*.pth")) + glob.glob(os.path.join(sp, "__editable__*.py")):
            seen.append(f)
            try:
                with open(f, encoding="utf-8", errors="replace") as fh:
                    text = fh.read(200_000)
            except OSError:
                continue
            lines = [ln.strip() for ln in text.splitlines()] if f.endswith(".pth") else \
                re.findall(r"[\'\"](/[^\'\"]+)[\'\"]", text)
            for ln in lines:
                if ln.startswith("/"):
                    seen.append(ln)
                    if os.path.isdir(ln):
                        out.append(ln)
    return out


def _stamp(paths: list[str]) -> tuple:
    """What `paths` are now (kind, inode, size, change times): a directory's times change with its entries."""
    out = []
    for p in paths:
        try:
            st = os.lstat(p)
            out.append((st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


#: `toolchain_dirs` per (environment, visible, refuse): (the paths it looked at, their stamp, the answer)
_toolchains: dict[tuple, tuple[list[str], tuple, list[str]]] = {}
_toolchains_lock = threading.Lock()


def toolchain_dirs(env: Mapping[str, str], *, visible: tuple[str, ...] = SYSTEM_ROOTS,
                   refuse: list[str] = ()) -> list[str]:
    """Directories outside `visible` that the environment's toolchain lives in (venvs, conda, an
    interpreter under /tmp or HOME, editable installs), to mount read-only. Never `/`, never a directory
    holding one of `refuse` (the user's HOME, the repository).

    Worked out once per process and environment (it lists bin directories, resolves links and reads every
    .pth file: ~8 ms, twice per sandbox), then reused while every file and directory it looked at is
    unchanged: a `pip install -e`, a new .pth file or a new interpreter in a bin directory changes one of
    them, and the answer is worked out again."""
    key = (tuple(sorted((k, env[k]) for k in (*_PATH_VARS, *_TOOL_VARS) if env.get(k))), visible, tuple(refuse))
    with _toolchains_lock:
        hit = _toolchains.get(key)
    if hit is not None and _stamp(hit[0]) == hit[1]:
        return list(hit[2])
    seen: list[str] = []
    found = _toolchain_dirs(env, visible, refuse, seen)
    seen = sorted(set(seen))
    with _toolchains_lock:
        if len(_toolchains) > 64:
            _toolchains.clear()
        _toolchains[key] = (seen, _stamp(seen), found)
    return list(found)


def _toolchain_dirs(env: Mapping[str, str], visible: tuple[str, ...], refuse: Sequence[str],
                    seen_paths: list[str]) -> list[str]:
    cands: list[str] = []
    for var in _PATH_VARS:
        cands += [p for p in env.get(var, "").split(":") if p]
    cands += [env[v] for v in _TOOL_VARS if env.get(v)]
    out: list[str] = []
    seen: set[str] = set()
    while cands:
        c = cands.pop(0)
        if not os.path.isabs(c):
            continue
        c = os.path.normpath(c)
        seen_paths += [c, os.path.join(c, "pyvenv.cfg"), os.path.join(os.path.dirname(c), "pyvenv.cfg"),
                       os.path.join(os.path.dirname(c), "libexec")]
        if c in seen or not os.path.isdir(c):
            continue
        seen.add(c)
        if os.path.basename(c) == "bin" and os.path.isfile(os.path.join(os.path.dirname(c), "pyvenv.cfg")):
            cands.append(os.path.dirname(c))
            cands += _python_prefixes(c, seen_paths)
            continue
        if os.path.isfile(os.path.join(c, "pyvenv.cfg")):
            cands += _venv_extras(c, seen_paths)
            cands += _python_prefixes(os.path.join(c, "bin"), seen_paths)
        elif os.path.basename(c) in ("bin", "shims"):
            cands += _python_prefixes(c, seen_paths)
            if os.path.isdir(os.path.join(os.path.dirname(c), "libexec")):
                cands.append(os.path.dirname(c))  # a version manager's shims call its libexec (pyenv, rbenv)
        real = os.path.realpath(c)
        if real != c:
            cands.append(real)
        if c == "/" or any(_under(c, v) for v in visible):
            continue
        if any(_under(r, c) for r in refuse if r):
            continue  # binding it would show the user's HOME
        out.append(c)
    out = sorted(set(out), key=len)
    return [d for i, d in enumerate(out) if not any(_under(d, o) for o in out[:i])]


_secret_cache: list[str] | None = None


def etc_secrets(root: str = "/etc", depth: int = 4) -> list[str]:
    """Files and directories under /etc that other users may not read (shadow, private keys): covered in the
    sandbox, whose uid 0 would otherwise read them as their owner. Cached per process."""
    global _secret_cache
    if _secret_cache is not None and root == "/etc":
        return _secret_cache
    out: list[str] = []
    base = root.rstrip("/").count("/")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in list(dirnames):
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if not stat.S_ISLNK(st.st_mode) and (st.st_mode & 0o005) != 0o005:
                out.append(p)
                dirnames.remove(name)
            elif p.count("/") - base >= depth:
                dirnames.remove(name)
        for name in filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and not st.st_mode & 0o004:
                out.append(p)
    if root == "/etc":
        _secret_cache = out
    return out


# -- the sandbox -----------------------------------------------------------------------------------------

class LocalSandbox(Sandbox):
    """A private workspace of a local repository directory; see the module docstring."""

    backend = "local"

    def __init__(self, repo: str | os.PathLike, options: SandboxOptions | None = None, *,
                 isolation: str | None = None, fingerprint: str | None = None) -> None:
        _cleanup.check_running()
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
            self._bwrap = flags
            self._why_not = why
        else:
            self._why_not = "isolation 'none' was asked for"
        self.isolated = self._bwrap is not None
        self._unshare = [] if self.isolated else unshare_flags()
        self._etc: EtcView | None = None
        self._lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._closed = False
        self._token = uuid.uuid4().hex
        self._stdin_n = 0
        self._ran = False
        self._snapshots: dict[str, Tree] = {}
        self._owned: list[Tree] = []
        self._clean_tree = None
        self._views: dict[tuple, list[str]] = {}
        self.cgroup: _cgroup.SandboxCgroup | None = None
        #: the sandboxes waiting for the next commands, and the process in the cgroups behind them
        self._ahead = Ahead(self._new_joined, lambda: (self._bwrap, self._view_flags(self._env(None)), self.root))
        self._runs_since_reset = 0

        sess = _session()
        sess.guard()
        self.dir = tempfile.mkdtemp(prefix="sb-", dir=sess.base)
        _cleanup.register(self)
        try:
            write_label(self.dir)
            entries = status_entries(self.original)
            fp = fingerprint or local_fingerprint(self.original, entries)
            self.skipped = junk_dirs(self.original, entries) if self.isolated else []
            tree = sess.cache_for(self.original, fp, self.skipped)
            self.workspace_kind, self._why_copy = sess.workspace_kind()
            if self.workspace_kind == "overlay":
                self.ws: Workspace | OverlayWorkspace = OverlayWorkspace(os.path.join(self.dir, "ws"), tree)
            else:
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
            self.cgroup = _cgroup.SandboxCgroup.create(self.limits.pids, self.limits.memory_mb)
            if self.cgroup is not None:
                write_label(self.dir, self.cgroup)
            if (self.cgroup is None or "pids" not in self.cgroup.controllers) and os.geteuid() == 0:
                _warn_once("nocgroup", "ssrkit: running as root and no pids cgroup can be created: "
                           "local sandboxes cannot contain a fork bomb (RLIMIT_NPROC does not apply to root)")
            self._prestart(refill=True)
            if self.isolated:  # after the repository's copy, not competing with it for the cores
                self._etc = sess.etc
                sess.etc.start()
            if not self.isolated:
                _warn_once("nobwrap", "ssrkit: %s; local sandboxes run commands as plain subprocesses. NOT "
                           "isolated: %s", self._why_not, "; ".join(self.not_isolated()))
        except BaseException:
            self.close()
            raise

    # -- what is isolated --------------------------------------------------------------------------------
    def _memory_cgroup(self) -> bool:
        return self.cgroup is not None and "memory" in self.cgroup.controllers

    def _kill_method(self) -> str:
        if self.isolated:
            return "pid namespace (bubblewrap)" + (" and cgroup" if self.cgroup else "")
        if self._unshare:
            return "pid namespace (unshare)" + (" and cgroup" if self.cgroup else "")
        if self.cgroup is not None:
            return "cgroup"
        return ("process group and environment-token scan only: a process that calls setsid and clears its "
                "environment survives")

    def not_isolated(self) -> list[str]:
        """What this sandbox does not isolate, one phrase each (empty with bubblewrap and cgroups)."""
        out = []
        if not self.isolated:
            out.append("network (the host's interfaces, loopback services and the internet)")
            out.append("filesystem (everything this user can read or write, HOME and the repository included)")
            if not self._unshare:
                out.append("/proc of other processes (their command lines and environments, ssrkit's own included)")
        elif self.limits.network:
            out.append("network (enabled by Limits.network)")
        if not self._memory_cgroup():
            out.append("memory of the process tree (only a per-process address-space limit; RAM-backed files in "
                       "HOME, /tmp and the workspace are unbounded)")
        if not self.isolated and not self._unshare and self.cgroup is None:
            out.append(f"process cleanup ({self._kill_method()})")
        return out

    @property
    def isolation(self) -> dict[str, object]:
        mem = (f"cgroup: {self.limits.memory_mb} MiB for the whole process tree, tmpfs writes included"
               if self._memory_cgroup() else f"address-space rlimit per process ({self.limits.memory_mb} MiB)")
        pids = "cgroup" if self.cgroup is not None and "pids" in self.cgroup.controllers else "rlimit"
        return {
            "backend": "local",
            "mechanism": "bubblewrap" if self.isolated else ("unshare" if self._unshare else "none"),
            "filesystem": ("allow-list view: system toolchain read-only, workspace, private HOME and /tmp; "
                           "secrets and hidden paths covered") if self.isolated else "none (the host's)",
            "network": "isolated" if self.isolated and not self.limits.network else "host",
            "processes": self._kill_method(),
            "memory": mem,
            "pids": f"{pids}: {self.limits.pids}",
            "workspace": ("overlay: a RAM copy of the repository as the read-only lower layer, a private upper "
                          "layer per workspace" if self.workspace_kind == "overlay"
                          else f"copy of a RAM copy of the repository (no overlay: {self._why_copy})"),
            "not_isolated": self.not_isolated(),
        }

    @property
    def parses_in_run(self) -> bool:
        """Under bubblewrap each command has its own pid namespace (and the tools of the one-command run:
        coreutils' head and date, visible in the sandbox as on the host)."""
        return self.isolated and _HAS_RUN_TOOLS

    def interrupt(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            self._kill_tree(proc)

    @property
    def parses_ahead(self) -> bool:
        """`write_file` writes through the host's view of the workspace, without the command lock; only under
        bubblewrap, where the code under test in another sandbox cannot see the parser waiting here (without
        it, the tests could write its log and its signal themselves)."""
        return self.isolated

    def read_capped(self, path: str) -> tuple[bytes, bool]:
        cap = OutputCapture(self.limits.output_bytes)
        with self._open_regular(path) as fh:
            while chunk := fh.read(1 << 20):  # streamed: the file may be as large as file_size_mb
                cap.feed(chunk)
        return cap.result()

    @property
    def interpreter_key(self) -> tuple:
        """Every local sandbox of one repository with the same environment resolves interpreters alike."""
        env = {k: v for k, v in self._env(None).items() if k not in ("HOME", "TMPDIR", "SSRKIT_SANDBOX_TOKEN")}
        return ("local", self.original, self.isolated, tuple(sorted(env.items())))

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
        try:  # a command may have left a symlink, FIFO or device there: opening it could block or escape
            st = os.lstat(host)
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                os.unlink(host)
        except FileNotFoundError:
            pass
        with open(host, "wb") as fh:
            fh.write(data)
        if mode is not None:
            os.chmod(host, mode)

    def read_file(self, path: str) -> bytes:
        with self._open_regular(path) as fh:
            return fh.read()

    def read_small(self, path: str, limit: int) -> bytes:
        with self._open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size  # a sparse file's apparent size: what reading it would cost
            if size > limit:
                raise FileTooLargeError(path, size, limit)
            return fh.read(limit + 1)

    def _open_regular(self, path: str):
        """Open a file for reading; a FIFO or device a command left would block a plain open, so it is opened
        without blocking and refused unless it is a regular file (IsADirectoryError for a directory)."""
        self._check_open()
        fd = os.open(self._host_path(path), os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
            raise OSError(errno.EINVAL, "not a regular file", path)
        return open(fd, "rb")

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
            changed = self._clean_tree is not tree or self._ran
            if self._clean_tree is not tree:
                self.ws.reset(tree)
            self._clean_tree = tree
            self._fresh_private_dirs()
            if changed:  # a waiting sandbox shows the old workspace mount and the old HOME and /tmp
                self._ahead.drop_launched()
                self._prestart(refill=True)
            self._runs_since_reset = 0
            self._gc()

    def _fresh_private_dirs(self) -> None:
        """Empty HOME and /tmp after any command ran: every reset starts a run with nothing left by the last."""
        if not self._ran:
            return
        for sub in ("home", "tmp"):
            d = os.path.join(self.dir, sub)
            force_rmtree(d)
            os.mkdir(d, 0o700)
        self._ran = False

    def _gc(self) -> None:
        live = set()
        for t in [*self._snapshots.values(), *self.ws.live()]:
            live |= {id(x) for x in (t.depends_on() if hasattr(t, "depends_on") else [t])}
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
        """The command's argv started the ordinary way: the limits shell, in bubblewrap (or unshare), first
        joining the sandbox's cgroups."""
        shell, limits = _limits_script(self.limits, init=self._bwrap is None and bool(self._unshare))
        inner = [shell, "-c", limits, "ssrkit-sandbox", command]
        if self._bwrap is None:
            argv = [*self._unshare, *inner]
        else:
            argv = [*self._bwrap, *self._view_flags(env), "--chdir", cwd, "--", *inner]
        procs = self.cgroup.procs_files if self.cgroup is not None else []
        if procs:  # join every cgroup of the sandbox, then become the command
            joins = " && ".join(f'echo $$ > "${i}"' for i in range(len(procs)))
            shift = f" && shift {len(procs) - 1}" if len(procs) > 1 else ""
            argv = ["/bin/sh", "-c", f'{joins}{shift} && exec "$@"', *procs, *argv]
        return argv

    def _prestart(self, depth: int = 1, wait: bool = True, refill: bool = False) -> None:
        """Have `depth` sandboxes waiting for the next commands (`_prestart.py`), with the view of the default
        environment, from processes that joined the cgroups ahead: under bubblewrap with cgroups only, where
        the commands cannot see them. `wait`: one may be made now (the next command is about to start);
        `refill`: then make the reserve of joined processes whole, in the background."""
        if self.isolated and self.cgroup is not None and not self._closed:
            self._ahead.fill(depth, wait)
            if refill:
                self._ahead.refill()

    def _new_joined(self) -> Prestarted | None:
        shell, prelude = _rlimits(self.limits)
        try:
            return Prestarted(self.cgroup.procs_files, os.path.join(self.dir, "io"), _BASH, shell, prelude)
        except OSError:
            return None

    def _view_flags(self, env: Mapping[str, str]) -> list[str]:
        """The bubblewrap mount plan: an allow-list view of the machine (see SYSTEM_ROOTS), a private /tmp,
        HOME and scratch, the workspace at the original path, secrets and hidden paths covered. Computed
        once per environment (finding the toolchain reads every .pth file of its virtualenvs)."""
        etc = self._etc.path if self._etc is not None else None
        key = (tuple(sorted(env.items())), etc)
        flags = self._views.get(key)
        if flags is None:
            if len(self._views) > 32:
                self._views.clear()
            flags = self._views[key] = self._make_view_flags(env, etc)
        return flags

    def _make_view_flags(self, env: Mapping[str, str], etc: str | None) -> list[str]:
        """`etc`: the copy of /etc without its secrets (`_etcview`), else None: /etc with each secret covered."""
        user_home = os.path.realpath(os.path.expanduser("~"))
        b: list[str] = []
        for root in SYSTEM_ROOTS:
            if os.path.islink(root):
                b += ["--symlink", os.readlink(root), root]
            elif root == "/etc" and etc is not None:
                b += ["--ro-bind", etc, root]
            elif os.path.isdir(root):
                b += ["--ro-bind", root, root]
        for p in etc_secrets() if etc is None else ():
            b += ["--tmpfs", p] if os.path.isdir(p) else ["--ro-bind", "/dev/null", p]
        b += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/run", "--dir", "/var", "--symlink", "../run",
              "/var/run", "--bind", os.path.join(self.dir, "tmp"), "/tmp", "--bind", os.path.join(self.dir, "tmp"),
              "/var/tmp"]
        # the environment's toolchain, and the interpreter ssrkit runs on (test scripts may name it by path)
        own = {**env, "PATH": env.get("PATH", "") + ":" + os.path.dirname(sys.executable)}
        tools = [d for d in toolchain_dirs(own, refuse=[user_home, self.original]) if not _under(d, self.original)]
        for d in tools:
            b += ["--ro-bind", d, d]
        visible = [*SYSTEM_ROOTS, *tools]
        b += self._hide_flags(visible)
        if user_home != "/" and any(_under(user_home, v) for v in visible) and not _under(self.original, user_home):
            b += ["--tmpfs", user_home]
        b += ["--bind", self.ws.path, self.original]
        for name in self.skipped:
            src = os.path.join(self.original, name)
            b += ["--ro-bind", src, src]
        b += ["--bind", self.scratch, self.scratch, "--bind", self.home, self.home, "--remount-ro", "/"]
        if not self.limits.network:
            b.append("--unshare-net")
        b += ["--unshare-pid", "--die-with-parent", "--new-session"]
        return b

    def _hide_flags(self, visible: list[str]) -> list[str]:
        """Cover each `options.hide` path that the view would show with an empty tmpfs (directory) or
        /dev/null (file). Paths outside the view need nothing: they do not exist in the sandbox, and leave no
        trace in its mount table. A path holding the repository or the sandbox is never hidden."""
        flags: list[str] = []
        keep = [self.original, self.dir]
        for raw in self.options.hide:
            p = os.path.realpath(raw)
            if not any(_under(p, v) for v in visible):
                continue
            if p == "/" or any(_under(k, p) for k in keep):
                _warn_once(f"hide:{p}", "ssrkit: not hiding %s from the sandbox: it holds the repository or "
                           "the sandbox", p)
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
            res = self._run(command, timeout=timeout, env=env, stdin=stdin, cwd=cwd)
        _cleanup.check_running()  # stopped while it ran (its sandbox closed under it): no result
        return res

    def _run(self, command, *, timeout, env, stdin, cwd) -> ExecResult:
        self._clean_tree = None
        self._ran = True
        full_env = self._env(env)
        in_cwd = self._resolve_cwd(cwd)
        if self.isolated:
            host_cwd = "/"
        else:
            host_cwd = in_cwd
            if not os.path.isdir(host_cwd):
                return ExecResult(1, f"ssrkit: working directory {cwd} does not exist\n", 0.0)
        data = stdin.encode("utf-8") if isinstance(stdin, str) else stdin
        cap = OutputCapture(self.limits.output_bytes)
        if not self._ahead.launched:
            self._prestart()  # the sandbox is started now, by a process that joined ahead
        waiter = self._ahead.take()
        if waiter is not None and (waiter.view != self._view_flags(full_env)
                                   or not waiter.start(command, full_env, in_cwd, data)):
            waiter.discard()
            waiter = None
        stdin_path = None
        if waiter is None and data is not None:
            self._stdin_n += 1
            stdin_path = os.path.join(self.dir, "io", f"stdin-{self._stdin_n}")
            with open(stdin_path, "wb") as fh:
                fh.write(data)
        proc: subprocess.Popen | None = None
        pidfd = None
        timed_out = False
        r = -1
        try:
            if waiter is not None:
                proc, r = waiter.proc, waiter.r
                start = time.monotonic()
            else:
                r, start, proc = self._spawn(self._argv(command, in_cwd, full_env), full_env, host_cwd, stdin_path)
            self._proc = proc
            if self._runs_since_reset:  # commands in a row: the next two's sandboxes start while this runs;
                self._prestart(2, wait=False)  # after a reset's first command a reset usually comes next
            self._runs_since_reset += 1
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
            if r >= 0:
                os.close(r)
            if waiter is not None:
                waiter.done()
            if stdin_path:
                try:
                    os.unlink(stdin_path)
                except OSError:
                    pass
            self._proc = None
            self._prestart(0, refill=True)  # the reserve, made whole while the caller reads the result
        seconds = time.monotonic() - start
        data, truncated = cap.result()
        rc = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        if rc < 0:
            rc = 128 - rc
        if timed_out:
            rc = TIMEOUT_EXIT_CODE
        return ExecResult(exit_code=rc, output=decode_output(data), seconds=seconds, timed_out=timed_out,
                          truncated=truncated)

    def _spawn(self, argv: list[str], env: Mapping[str, str], cwd: str,
               stdin_path: str | None) -> tuple[int, float, subprocess.Popen]:
        """Start `argv` the ordinary way: (read end of its output pipe, start time, process)."""
        r, w = os.pipe()
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        stdin_f = open(stdin_path, "rb") if stdin_path else subprocess.DEVNULL
        start = time.monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=stdin_f, stdout=w, stderr=w, env=env, cwd=cwd,
                                    start_new_session=True, close_fds=True, preexec_fn=signals_as_alone())
        except OSError as e:
            os.close(r)
            raise SandboxError(f"could not start a command in the local sandbox: {e}") from None
        finally:
            os.close(w)
            if stdin_path:
                stdin_f.close()  # type: ignore[union-attr]
        return r, start, proc

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
        if proc.returncode is None and proc.poll() is None:
            try:  # reaped before the cgroup is emptied: the dead leader would stay listed in it meanwhile
                proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                pass
        if self.cgroup is not None:
            running = proc.pid  # the waiting processes (other children of this process) are spared
            self.cgroup.kill_all(spare=(lambda pids: Ahead.spared(pids, running)) if self.isolated else None)
        elif self._bwrap is None:
            _scan_kill(proc.pid, f"SSRKIT_SANDBOX_TOKEN={self._token}".encode())

    # -- lifetime ----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        _cleanup.check_running()  # the process is stopping: Interrupted, whether this sandbox is closed yet or not
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
            self._ahead.close()
            if self.cgroup is not None:
                self.cgroup.remove()
                self.cgroup = None
            self._snapshots.clear()
            self._owned.clear()
            ws = getattr(self, "ws", None)
            if ws is not None:
                ws.close()  # an overlay is unmounted before its directory goes
            force_rmtree(self.dir)
        _cleanup.unregister(self)

    def __repr__(self) -> str:
        iso = "bwrap" if self.isolated else "none"
        return f"<LocalSandbox {self.original} isolation={iso} dir={self.dir}>"


def pristine_cache_dir() -> Path:
    """The per-process directory holding pristine caches and workspaces (for diagnostics and tests)."""
    return Path(_session().base)
