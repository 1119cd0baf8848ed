"""Per-sandbox cgroups (pids and memory), when the machine lets us create them.

RLIMIT_NPROC is not enforced for root (uid 0 is exempt, in any user namespace), so as root the only way
to stop a fork bomb is the pids controller; and RLIMIT_AS bounds each process, not the tree (three processes
hold three times the limit), nor the RAM-backed files a command writes to its tmpfs HOME, /tmp or workspace.
So every process a command starts joins the sandbox's cgroups (before bwrap or bash runs): `pids.max` caps
their number, the memory limit caps the whole tree's memory *including the tmpfs pages it writes* (shmem is
charged to the writer's cgroup), and `cgroup.procs` lists every survivor to kill, however it detached itself
(setsid, double fork). cgroup v1 (`/sys/fs/cgroup/pids`, `/sys/fs/cgroup/memory`) and v2 (a child of our own
cgroup with the controllers enabled) are both tried; a controller that is not writable is left out, and
`SandboxCgroup.create` returns None when neither is.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import time
from typing import Callable

from ._cleanup import stale_names
from ._procfs import stat_fields

_counter = itertools.count()


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fstype, super options) of cgroup mounts."""
    out = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                f = left.split()
                r = right.split()
                if len(f) >= 5 and r and r[0] in ("cgroup", "cgroup2"):
                    out.append((f[3], f[4].replace("\\040", " "), r[0], r[2] if len(r) > 2 else ""))
    except OSError:
        pass
    return out


def _own_paths() -> dict[str, str]:
    """controller set ('' for v2) -> our cgroup path, from /proc/self/cgroup."""
    out = {}
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    out[parts[1]] = parts[2]
    except OSError:
        pass
    return out


def _join(mount_root: str, mountpoint: str, cgpath: str) -> str:
    rel = cgpath
    if mount_root != "/" and (rel == mount_root or rel.startswith(mount_root + "/")):
        rel = rel[len(mount_root):]
    return os.path.join(mountpoint, rel.lstrip("/"))


def _writable_dir(path: str, controller: str = "pids") -> bool:
    probe = os.path.join(path, f"ssrkit-probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    marker = _MARKER[controller]
    ok = any(os.path.exists(os.path.join(probe, m)) for m in ((marker,) if isinstance(marker, str) else marker))
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return ok


def _v1_dir(controller: str) -> str | None:
    own = _own_paths()
    for root, mp, fstype, opts in _mounts():
        if fstype == "cgroup" and controller in opts.split(","):
            key = next((k for k in own if controller in k.split(",")), None)
            if key is None:
                continue
            d = _join(root, mp, own[key])
            if os.path.isdir(d) and _writable_dir(d, controller):
                return d
    return None


def _v2_dir(controller: str) -> str | None:
    own = _own_paths()
    for root, mp, fstype, _opts in _mounts():
        if fstype == "cgroup2" and "" in own:
            d = _join(root, mp, own[""])
            try:
                with open(os.path.join(mp, "cgroup.controllers")) as fh:
                    if controller not in fh.read().split():
                        continue
                sub = os.path.join(d, "cgroup.subtree_control")
                with open(sub) as fh:
                    enabled = controller in fh.read().split()
                if not enabled:
                    with open(sub, "w") as fh:
                        fh.write(f"+{controller}")
            except OSError:
                continue
            if _writable_dir(d, controller):
                return d
    return None


_parents: dict[str, str | None] = {}

#: the file that proves a controller is active in a new cgroup directory
_MARKER = {"pids": "pids.max", "memory": ("memory.limit_in_bytes", "memory.max")}


def parent_dir(controller: str = "pids") -> str | None:
    """Where sandbox cgroups of `controller` are created, or None when none is writable (cached)."""
    if controller not in _parents:
        _parents[controller] = _v1_dir(controller) or _v2_dir(controller)
    return _parents[controller]


class SandboxCgroup:
    """The cgroup directories of one sandbox (one per v1 hierarchy, or one v2 directory)."""

    def __init__(self, paths: list[str], controllers: list[str], memory_mb: int | None = None) -> None:
        self.paths = paths
        self.controllers = controllers
        self.memory_mb = memory_mb
        self.procs_files = [os.path.join(p, "cgroup.procs") for p in paths]

    @property
    def path(self) -> str:
        return self.paths[0]

    @classmethod
    def create(cls, max_pids: int, memory_mb: int | None = None) -> "SandboxCgroup | None":
        """pids (and memory, when `memory_mb`) cgroups for one sandbox; None when no controller is writable."""
        name = f"ssrkit-{os.getpid()}-{next(_counter)}"
        made: dict[str, str] = {}  # parent -> path
        controllers: list[str] = []
        for controller, value in (("pids", str(max(int(max_pids), 8))),
                                  ("memory", str(int(memory_mb) * 1024 * 1024) if memory_mb else None)):
            if value is None:
                continue
            parent = parent_dir(controller)
            if parent is None:
                continue
            path = made.get(parent) or os.path.join(parent, name)
            try:
                if parent not in made:
                    os.mkdir(path)
                    made[parent] = path
                if controller == "pids":
                    _write(os.path.join(path, "pids.max"), value)
                elif os.path.exists(os.path.join(path, "memory.max")):
                    _write(os.path.join(path, "memory.max"), value)
                    _write(os.path.join(path, "memory.swap.max"), "0", missing_ok=True)
                else:
                    _write(os.path.join(path, "memory.limit_in_bytes"), value)
                    _write(os.path.join(path, "memory.memsw.limit_in_bytes"), value, missing_ok=True)
                controllers.append(controller)
            except OSError:
                continue
        if not controllers:
            for path in made.values():
                try:
                    os.rmdir(path)
                except OSError:
                    pass
            return None
        return cls(list(made.values()), controllers, memory_mb if "memory" in controllers else None)

    def pids(self) -> list[int]:
        out: set[int] = set()
        for f in self.procs_files:
            try:
                with open(f) as fh:
                    out.update(int(x) for x in fh.read().split())
            except (OSError, ValueError):
                pass
        return sorted(out)

    def kill_all(self, timeout: float = 5.0, spare: Callable[[list[int]], set[int]] | None = None,
                 gone: bool = False) -> bool:
        """SIGKILL every process in the cgroups (but those `spare` picks from their pids: the sandbox's own
        `Prestarted` sandbox, waiting for the next command) until none is left that could run again: each
        is gone or exiting (`_exiting`); True when so. An exiting process is not waited for: what ends a
        command is mostly its pid namespace's init tearing the namespace down (1-5 ms, in the kernel), and
        nothing of it can run or fork any more. Whatever it forked before it began to exit is listed by
        then: a second look at the cgroups, after the check, finds it. With `gone`, until the cgroups are
        empty (before they are removed)."""
        deadline = time.monotonic() + timeout
        kill_files = [os.path.join(p, "cgroup.kill") for p in self.paths] if spare is None else []
        delay = 0.0002  # a killed process exits as soon as it is scheduled: short waits first
        while True:
            pids = self._unspared(spare)
            if not pids or (not gone and all(_exiting(p) for p in pids) and set(self._unspared(spare)) <= set(pids)):
                return True
            for kill_file in kill_files:
                if os.path.exists(kill_file):
                    try:
                        _write(kill_file, "1")
                    except OSError:
                        pass
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(delay)
            delay = min(delay * 2, 0.05)

    def _unspared(self, spare: Callable[[list[int]], set[int]] | None) -> list[int]:
        pids = self.pids()
        if spare is not None and pids:
            kept = spare(pids)
            pids = [p for p in pids if p not in kept]
        return pids

    def remove(self) -> None:
        self.kill_all(gone=True)
        for path in self.paths:
            _rmdir(path)


_PF_EXITING = 0x4  # the kernel's task flag: the process has begun to exit (and left any fork it was in)


def _exiting(pid: int) -> bool:
    """Whether process `pid` is gone, a zombie, or exiting (it can neither run nor fork again)."""
    rest = stat_fields(pid)
    if rest is None:
        return True
    try:
        return rest[0] in (b"Z", b"X", b"x") or bool(int(rest[6]) & _PF_EXITING)
    except (IndexError, ValueError):
        return False


def _write(path: str, value: str, missing_ok: bool = False) -> None:
    try:
        with open(path, "w") as fh:
            fh.write(value)
    except FileNotFoundError:
        if not missing_ok:
            raise
    except OSError:
        if not missing_ok:
            raise


def _rmdir(path: str) -> None:
    for _ in range(50):
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def is_sandbox_cgroup(path: str) -> bool:
    """True for a cgroup like those `SandboxCgroup.create` makes (`ssrkit-PID-N`, on a cgroup filesystem):
    what a label.json names is killed and removed only when it is one, never a directory elsewhere."""
    real = os.path.realpath(path)
    mounts = [mp for _root, mp, fstype, _opts in _mounts() if fstype in ("cgroup", "cgroup2")]
    return re.fullmatch(r"ssrkit-\d+-\d+", os.path.basename(real)) is not None and \
        any(real.startswith(mp.rstrip("/") + "/") for mp in mounts)


def sweep_stale() -> None:
    """Remove cgroups left by ssrkit processes that no longer exist."""
    for controller in ("pids", "memory"):
        parent = parent_dir(controller)
        for name in stale_names(parent, r"ssrkit-(\d+)-\d+") if parent else []:
            SandboxCgroup([os.path.join(parent, name)], [controller]).remove()
