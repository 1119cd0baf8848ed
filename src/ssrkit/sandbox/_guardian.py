"""The guardian of one process's local sandboxes: what they hold dies with that process, SIGKILL included.

A process killed without running its cleanup (SIGKILL, the OOM killer, a node agent's hard stop) leaves its
local sandboxes behind: overlay mounts of RAM copies of the repository, cgroups (a memory cgroup keeps the
tmpfs pages its commands wrote charged), the copies themselves. The next ssrkit process on the machine sweeps
them (`local._sweep_stale_dirs`, `_cgroup.sweep_stale`), but that may be hours later, and on a shared node
the RAM is someone else's meanwhile. So each process that opens a local sandbox starts this guardian first
(`local._Session`), and it removes all of that the moment the process is gone:

    python3 -I -S _guardian.py PID ROOT PREFIX [CGROUP_PARENT ...]

It is PID's child, in a session of its own (a kill of PID's process group, a closing terminal or Ctrl-C
does not reach it), holding nothing of PID's (stdin, stdout and stderr are /dev/null, no other descriptor,
its directory is /, an empty environment), running nothing but this file (no shell, nothing a sandbox wrote),
and it sleeps on a pidfd of PID, so it wakes when PID exits, however. Then, in this order, it kills the
processes in the cgroups `CGROUP_PARENT/PREFIX*` and removes those cgroups, detaches every mount under
`ROOT/PREFIX*` (deepest first), and removes `ROOT/PREFIX*`. After a clean exit, PID removed all of it
already: the guardian finds nothing and ends. PREFIX is `ssrkit-PID-`, the names the session's temp root
and cgroups are made with (`local._Session`, `_cgroup.SandboxCgroup.create`); the guardian is given them,
it knows no layout of its own. Standard library only (it runs with `-I -S`: ~10 ms to start, a few MB).
One guardian a process (`local._guardian_for`); one killed on its own is started again by the process's
next sandbox, and what a process whose guardian died with it left is swept by the next ssrkit process.
"""

import ctypes
import ctypes.util
import glob
import os
import select
import shutil
import signal
import sys
import time

_MNT_DETACH = 2


def wait_for_exit(pid):
    """Return once process `pid` (this process's parent) has exited."""
    try:
        fd = os.pidfd_open(pid)  # Linux >= 5.3
    except (AttributeError, OSError):
        fd = None
    if os.getppid() != pid:  # it is gone already (this process was handed to a reaper)
        return
    if fd is not None:
        select.select([fd], [], [])
        return
    while os.getppid() == pid:
        time.sleep(0.2)


def _pids(cgroup):
    try:
        with open(os.path.join(cgroup, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        return []


def remove_cgroup(path, timeout=10.0):
    """Kill every process in the cgroup until it is empty, then remove it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = _pids(path)
        if not pids:
            break
        kill = os.path.join(path, "cgroup.kill")  # cgroup v2, Linux >= 5.14: the whole tree at once
        if os.path.exists(kill):
            try:
                with open(kill, "w") as fh:
                    fh.write("1")
            except OSError:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
    while time.monotonic() < deadline:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.02)


def detach_mounts(prefix):
    """Detach every mount whose mount point starts with `prefix`, deepest first."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            points = [line.split()[4].replace("\\040", " ") for line in fh]
    except OSError:
        return
    mine = sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)
    if not mine:
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    for p in mine:
        libc.umount2(p.encode(), _MNT_DETACH)


def remove_tree(path):
    """Remove a tree, whatever modes a command left on it."""

    def onerror(func, p, exc):  # noqa: ARG001
        try:
            os.chmod(os.path.dirname(p), 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, onerror=onerror)
            else:
                os.unlink(p)
        except OSError:
            pass

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=onerror)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def clean(root, prefix, cgroup_parents):
    """Remove what the sandboxes named `prefix*` left: their processes and cgroups, mounts, directories."""
    for parent in cgroup_parents:
        for path in glob.glob(os.path.join(glob.escape(parent), glob.escape(prefix) + "*")):
            remove_cgroup(path)
    detach_mounts(os.path.join(root, prefix))
    for path in glob.glob(os.path.join(glob.escape(root), glob.escape(prefix) + "*")):
        remove_tree(path)


def main():
    pid, root, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.chdir("/")  # holding no directory of anyone's
    os.closerange(3, 1 << 16)  # nor a descriptor ssrkit inherited (a pipe a caller waits to see closed)
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    wait_for_exit(pid)
    clean(root, prefix, sys.argv[4:])


if __name__ == "__main__":
    main()
