"""A pids cgroup per local sandbox, when the machine lets us create one.

RLIMIT_NPROC is not enforced for root (uid 0 is exempt, in any user namespace), so as root the only way
to stop a fork bomb is the pids controller: every process a command starts joins the sandbox's cgroup
(before bwrap or bash runs), `pids.max` caps their number, and `cgroup.procs` lists every survivor to kill,
however it detached itself (setsid, double fork). cgroup v1 (`/sys/fs/cgroup/pids`) and v2 (a child of our
own cgroup with the pids controller enabled) are both tried; when neither is writable, None is returned
and the caller falls back to rlimits.
"""

from __future__ import annotations

import itertools
import os
import re
import signal
import time

from ._cleanup import pid_alive

_counter = itertools.count()
_parent: str | None | bool = False  # False: not probed yet


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


def _writable_dir(path: str) -> bool:
    probe = os.path.join(path, f"ssrkit-probe-{os.getpid()}-{next(_counter)}")
    try:
        os.mkdir(probe)
    except OSError:
        return False
    ok = os.path.exists(os.path.join(probe, "pids.max"))
    try:
        os.rmdir(probe)
    except OSError:
        pass
    return ok


def parent_dir() -> str | None:
    """Where sandbox cgroups are created, or None when no pids cgroup is writable (cached)."""
    global _parent
    if _parent is not False:
        return _parent  # type: ignore[return-value]
    _parent = None
    own = _own_paths()
    for root, mp, fstype, opts in _mounts():
        if fstype == "cgroup" and "pids" in opts.split(","):
            key = next((k for k in own if "pids" in k.split(",")), None)
            if key is None:
                continue
            d = _join(root, mp, own[key])
            if os.path.isdir(d) and _writable_dir(d):
                _parent = d
                return d
    for root, mp, fstype, _opts in _mounts():
        if fstype == "cgroup2" and "" in own:
            d = _join(root, mp, own[""])
            try:
                with open(os.path.join(mp, "cgroup.controllers")) as fh:
                    if "pids" not in fh.read().split():
                        continue
                sub = os.path.join(d, "cgroup.subtree_control")
                with open(sub) as fh:
                    enabled = "pids" in fh.read().split()
                if not enabled:
                    with open(sub, "w") as fh:
                        fh.write("+pids")
            except OSError:
                continue
            if _writable_dir(d):
                _parent = d
                return d
    return None


class PidsCgroup:
    def __init__(self, path: str) -> None:
        self.path = path
        self.procs_file = os.path.join(path, "cgroup.procs")

    @classmethod
    def create(cls, max_pids: int) -> "PidsCgroup | None":
        parent = parent_dir()
        if parent is None:
            return None
        path = os.path.join(parent, f"ssrkit-{os.getpid()}-{next(_counter)}")
        try:
            os.mkdir(path)
            with open(os.path.join(path, "pids.max"), "w") as fh:
                fh.write(str(max(int(max_pids), 8)))
        except OSError:
            try:
                os.rmdir(path)
            except OSError:
                pass
            return None
        return cls(path)

    def pids(self) -> list[int]:
        try:
            with open(self.procs_file) as fh:
                return [int(x) for x in fh.read().split()]
        except (OSError, ValueError):
            return []

    def kill_all(self, timeout: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup until it is empty; True when it is."""
        deadline = time.monotonic() + timeout
        kill_file = os.path.join(self.path, "cgroup.kill")
        delay = 0.001
        while True:
            pids = self.pids()
            if not pids:
                return True
            if os.path.exists(kill_file):
                try:
                    with open(kill_file, "w") as fh:
                        fh.write("1")
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

    def remove(self) -> None:
        self.kill_all()
        for _ in range(50):
            try:
                os.rmdir(self.path)
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def sweep_stale() -> None:
    """Remove cgroups left by ssrkit processes that no longer exist."""
    parent = parent_dir()
    if parent is None:
        return
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        m = re.fullmatch(r"ssrkit-(\d+)-\d+", name)
        if not m or pid_alive(int(m.group(1))):
            continue
        PidsCgroup(os.path.join(parent, name)).remove()


