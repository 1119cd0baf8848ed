"""Workspaces as kernel overlay mounts: what a workspace, a reset and a snapshot cost is what changed.

The lower layer is the per-process pristine cache of the repository (RAM-backed, made once, never written).
A workspace is an overlay mount of it with a private upper layer: setting one up is a mount, `reset` is an
unmount, emptying the upper layer and a mount, and `snapshot` copies the upper layer alone (the files
changed since the last reset) into a new read-only layer that later resets stack on the lower ones. Exact
by construction: whatever a command does, the lower layers stay as they were and the upper is thrown away.

Used where the kernel lets this process mount overlays on the host (as root; `overlay_available` probes
once: mount, copy-up, whiteout, opaque directory, rename, snapshot and remount). Elsewhere the local backend
keeps its copies (`_tree.Workspace`). Mounts live in the per-process temp root; `sweep_mounts` unmounts
those of dead processes before their directories are removed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import stat
import threading
from dataclasses import dataclass

from ._tree import Tree, cp_a, force_rmtree

try:
    from ..errors import SandboxError
except ImportError:  # pragma: no cover - never run standalone
    SandboxError = RuntimeError  # type: ignore[misc,assignment]

_MNT_DETACH = 2
_OPTIONS = "redirect_dir=on,index=off,metacopy=off"
_libc = None
_libc_lock = threading.Lock()


def _c() -> ctypes.CDLL:
    global _libc
    with _libc_lock:
        if _libc is None:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            _libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
            _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        return _libc


def _mount(lowers: list[str], upper: str, work: str, target: str) -> None:
    opts = f"lowerdir={':'.join(lowers)},upperdir={upper},workdir={work},{_OPTIONS}".encode()
    if _c().mount(b"overlay", target.encode(), b"overlay", 0, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount overlay on {target}: {os.strerror(err)}")


def _umount(target: str) -> None:
    if _c().umount2(target.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22,):  # EINVAL: not mounted
            raise OSError(err, f"umount {target}: {os.strerror(err)}")


@dataclass
class _Root:
    """Attributes of a workspace's root directory (an overlay shows its upper layer's root)."""

    mode: int
    uid: int
    gid: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> "_Root":
        st = os.lstat(path)
        return cls(stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns)

    def apply(self, path: str) -> None:
        os.chmod(path, self.mode)
        os.lchown(path, self.uid, self.gid)
        os.utime(path, ns=(self.mtime_ns, self.mtime_ns))


class Layer:
    """A snapshot: the upper layer of a workspace, copied, on top of the layers it was made over."""

    def __init__(self, path: str, below: list, root: _Root) -> None:
        self.path = path
        self.below = below  # Layers then the base Tree, nearest first
        self.root = root
        self.owned = True

    @property
    def lowers(self) -> list[str]:
        return [self.path, *(b.path for b in self.below)]

    def depends_on(self) -> list:
        return [self, *self.below]


def _lowers_of(tree) -> list[str]:
    return tree.lowers if isinstance(tree, Layer) else [tree.path]


def _below_of(tree) -> list:
    return tree.depends_on() if isinstance(tree, Layer) else [tree]


def _root_of(tree) -> _Root:
    return tree.root if isinstance(tree, Layer) else _Root.of(tree.path)


class OverlayWorkspace:
    """A workspace mounted at `path` over `tree` (a pristine cache `Tree` or a `Layer`)."""

    def __init__(self, path: str, tree: Tree) -> None:
        self.dir = path + ".layers"
        self.path = path
        self.manifest: dict = {}  # the copy workspace's bookkeeping; an overlay needs none
        os.mkdir(self.dir, 0o700)
        os.mkdir(self.path, 0o700)
        self._n = 0
        self._mounted = False
        self.base = tree
        self._mount_fresh(tree)

    # -- mounting ------------------------------------------------------------------------------------
    def _mount_fresh(self, tree) -> None:
        """Mount `tree` with a new, empty upper layer (the old one, if any, removed after)."""
        if self._mounted:
            _umount(self.path)
            self._mounted = False
        self._n += 1
        upper, work = os.path.join(self.dir, f"u{self._n}"), os.path.join(self.dir, f"w{self._n}")
        for old in os.listdir(self.dir):
            force_rmtree(os.path.join(self.dir, old))
        os.mkdir(upper)
        os.mkdir(work, 0o700)
        _root_of(tree).apply(upper)
        _mount(_lowers_of(tree), upper, work, self.path)
        self._mounted = True
        self.upper = upper
        self.base = tree

    def live(self) -> list:
        """The trees this workspace's mount stands on (kept alive by the sandbox's garbage collection)."""
        return _below_of(self.base)

    # -- reset and snapshot ----------------------------------------------------------------------------
    def reset(self, tree) -> None:
        self._mount_fresh(tree)

    def snapshot(self, dest: str) -> "Layer | Tree":
        """The current state as a tree: the base itself when nothing changed, else a new layer holding a
        copy of the upper layer (whiteouts and opaque / redirect markers included)."""
        root = _Root.of(self.upper)
        if not os.listdir(self.upper) and root == _root_of(self.base):
            return self.base
        cp_a(self.upper, dest)
        return Layer(dest, _below_of(self.base), root)

    def close(self) -> None:
        if self._mounted:
            try:
                _umount(self.path)
            except OSError:
                pass
            self._mounted = False
        force_rmtree(self.dir)
        try:
            os.rmdir(self.path)
        except OSError:
            pass


# -- availability ---------------------------------------------------------------------------------------

_probe: tuple[bool, str] | None = None
_probe_lock = threading.Lock()


def overlay_available(scratch: str) -> tuple[bool, str]:
    """(True, "") when overlay workspaces work here, else (False, why). Probed once per process in `scratch`
    (a directory on the filesystem the caches live on): a lower with a file and a directory; in a workspace
    a file is changed, one deleted, the directory replaced (opaque) and renamed; a snapshot of that is
    mounted again and must show exactly that."""
    global _probe
    with _probe_lock:
        if _probe is not None:
            return _probe
        base = os.path.join(scratch, "overlay-probe")
        ws = None
        try:
            os.makedirs(os.path.join(base, "lower", "d"))
            for name, text in (("keep", "k"), ("gone", "g"), ("d/x", "x")):
                with open(os.path.join(base, "lower", name), "w") as fh:
                    fh.write(text)
            ws = OverlayWorkspace(os.path.join(base, "ws"), Tree(os.path.join(base, "lower"), owned=False))
            m = ws.path
            with open(os.path.join(m, "keep"), "w") as fh:
                fh.write("changed")
            os.unlink(os.path.join(m, "gone"))
            force_rmtree(os.path.join(m, "d"))
            os.mkdir(os.path.join(m, "d"))
            with open(os.path.join(m, "d", "y"), "w") as fh:
                fh.write("y")
            os.rename(os.path.join(m, "d"), os.path.join(m, "e"))
            snap = ws.snapshot(os.path.join(base, "snap"))
            ws.reset(ws.base if isinstance(snap, Tree) else snap.below[-1])
            if sorted(os.listdir(m)) != ["d", "gone", "keep"]:
                raise OSError("a reset did not bring the lower layer back")
            ws.reset(snap)
            got = {os.path.relpath(os.path.join(dp, f), m) for dp, _, fs in os.walk(m) for f in fs}
            with open(os.path.join(m, "keep")) as fh:
                kept = fh.read()
            if got != {"keep", "e/y"} or kept != "changed" or os.path.exists(os.path.join(m, "d")):
                raise OSError(f"a snapshot mounted again shows {sorted(got)}")
            _probe = (True, "")
        except OSError as e:
            _probe = (False, f"overlay mounts do not work here ({e.strerror or e})")
        finally:
            if ws is not None:
                ws.close()
            force_rmtree(base)
        return _probe


def sweep_mounts(root: str) -> None:
    """Detach every mount under `root` (a dead process's temp root), deepest first."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            points = [line.split()[4] for line in fh]
    except OSError:
        return
    prefix = root.rstrip("/") + "/"
    for p in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
        try:
            _umount(p.replace("\\040", " "))
        except OSError:
            pass

