"""A copy of /etc without its secrets, for bubblewrap to mount read-only as the sandbox's /etc.

A sandbox's uid 0 reads the files its owner may read, /etc/shadow and private keys among them, so the view
must not show them. Covering each with its own mount costs bubblewrap about 0.13 ms per path on every
command (each bind re-reads the mount table); a dozen on an ordinary machine is a sixth of a command's cost.
One copy per process, made in the background while the first commands run, replaces them all with one
bind: every directory that others may enter and every regular file that others may read is copied, with its
mode, owner and mtime; a secret (anything else) is there as an empty file or directory, so a path that
exists on the machine exists in the view. Until the copy is ready, and where it cannot be made (no tar, or an
/etc larger than `MAX_BYTES`), commands get the covering mounts instead (`etc_secrets`); so do they all with
SSRKIT_ETC_VIEW=masks. The copy is as of the process's start: a later change to /etc is not seen by the
sandboxes of a process already running.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading

from ..errors import SandboxError
from ._tree import _TAR, tar_pipe

MAX_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 20_000


def plan(root: str = "/etc") -> tuple[list[str], list[tuple[str, bool]]] | None:
    """(relative paths to copy, in walk order; (relative secret path, is a directory)), or None when `root`
    is too large to copy. Symlinks are copied as links."""
    copy: list[str] = []
    secret: list[tuple[str, bool]] = []
    size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        keep: list[str] = []  # the directories to walk into
        for name in sorted(dirnames + filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                copy.append(rel)
            elif stat.S_ISDIR(mode):
                if (mode & 0o005) == 0o005:
                    copy.append(rel)
                    keep.append(name)
                else:
                    secret.append((rel, True))
            elif stat.S_ISREG(mode) and mode & 0o004:
                copy.append(rel)
                size += st.st_size
            else:
                secret.append((rel, False))  # unreadable to others, or no regular file (a socket, a fifo)
        dirnames[:] = keep
        if size > MAX_BYTES or len(copy) > MAX_ENTRIES:
            return None
    return copy, secret


def make(dest: str, root: str = "/etc") -> bool:
    """Copy `root` without its secrets to new directory `dest`; False (and `dest` perhaps half made) when it
    cannot be."""
    if _TAR is None:
        return False
    todo = plan(root)
    if todo is None:
        return False
    copy, secret = todo
    os.mkdir(dest, 0o755)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", errors="surrogateescape", delete=False,
                                     dir=os.path.dirname(dest), suffix=".list") as fh:
        fh.write("".join(f"./{p}\0" for p in copy))
        listing = fh.name
    try:
        tar_pipe(root, dest, ["--no-recursion", "--null", "-T", listing])
    except SandboxError:
        return False
    finally:
        os.unlink(listing)
    for rel, is_dir in secret:
        p = os.path.join(dest, rel)
        if not os.path.isdir(os.path.dirname(p)) or os.path.lexists(p):
            continue
        if is_dir:
            os.mkdir(p, 0o700)
        else:
            os.close(os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    st = os.stat(root)
    os.chmod(dest, stat.S_IMODE(st.st_mode))
    return True


class EtcView:
    """The per-process copy: `start` makes it in a background thread, `path` is it once ready (else None)."""

    def __init__(self, dest: str) -> None:
        self.dest = dest
        self.path: str | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._thread is None and os.environ.get("SSRKIT_ETC_VIEW", "copy") != "masks":
                self._thread = threading.Thread(target=self._make, name="ssrkit-etc-view", daemon=True)
                self._thread.start()

    def _make(self) -> None:
        try:
            if make(self.dest):
                self.path = self.dest
        except OSError:
            pass

    def wait(self, timeout: float | None = None) -> str | None:
        """The copy's path once made (waiting up to `timeout`), None when there is none (yet)."""
        t = self._thread
        if t is not None:
            t.join(timeout)
        return self.path
