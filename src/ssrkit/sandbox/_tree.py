"""Workspaces and snapshots as plain directory trees on one (RAM-backed) filesystem.

A `Tree` is an immutable copy of a repository directory: the per-process pristine cache of a source, or a
named snapshot of a sandbox. Trees share unchanged files with hard links, so a snapshot costs one walk of
the workspace plus copying the files that changed. A workspace is a *real copy* (never hard links: a command
may write a file in place), and its `manifest` records, for every file and symlink, the workspace inode and
ctime right after ssrkit wrote it and the tree inode it was copied from. ctime changes on every write,
chmod, rename-over or replacement and cannot be set by user space, so an entry whose inode and ctime still
match is byte-for-byte (and mode-for-mode) the tree's file: `reset` copies only the entries that differ,
deletes the entries the tree lacks and restores directory modes. That is exact for everything a command
can do short of changing the system clock, and costs one walk plus the changed files.

The docker backend runs this same file inside the container (`python3 _tree.py snapshot|reset ...`), with
the state pickled between calls; see `main`.

Limitations (documented): hard links *inside* a repository become separate files after an incremental
reset; special files (fifos, sockets, devices) force a full copy.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass

try:
    from ..errors import SandboxError
except ImportError:  # run as a script inside a container (see `main`)
    class SandboxError(Exception):  # type: ignore[no-redef]
        pass

# kinds
FILE, DIR, LINK, OTHER = "f", "d", "l", "o"


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return FILE
    if stat.S_ISDIR(mode):
        return DIR
    if stat.S_ISLNK(mode):
        return LINK
    return OTHER


def walk(root: str) -> dict[str, os.stat_result]:
    """lstat of every entry under `root` (not `root` itself), keyed by '/'-separated relative path."""
    out: dict[str, os.stat_result] = {}
    stack = [("", root)]
    while stack:
        rel, path = stack.pop()
        with os.scandir(path) as it:
            for e in it:
                r = f"{rel}/{e.name}" if rel else e.name
                st = e.stat(follow_symlinks=False)
                out[r] = st
                if stat.S_ISDIR(st.st_mode):
                    stack.append((r, e.path))
    return out


def cp_a(src: str, dst: str) -> None:
    """`cp -a src dst` (dst must not exist): the fastest exact copy available (reflinks where possible),
    extended attributes included (an overlay upper layer's whiteouts and redirects are xattrs)."""
    _run_cp(["cp", "-a", "--reflink=auto", "--", src, dst], src, dst)


_TAR = shutil.which("tar")


def copy_into(src: str, dst: str, names: list[str]) -> None:
    """Copy the entries `names` of directory `src` (relative; `.` for all, the root's own mode, owner and
    mtime included) into existing directory `dst`: contents, modes, owners (as root), mtimes to the
    nanosecond (the POSIX archive format), symlinks and hard links; not extended attributes or ACLs, which a
    repository does not need.

    A tar pipe: about half of `cp -a`'s time on a tree of many small files (fewer system calls per file, and
    reading and writing run on two cores); `cp -a` where tar is not installed."""
    members = [n if n == "." else f"./{n}" for n in names]  # ./ : a name starting with '-' is no option
    if _TAR is None:
        _run_cp(["cp", "-a", "--reflink=auto", "-t", dst, "--", *members], src, dst, cwd=src)
        return
    tar_pipe(src, dst, ["--", *members])


def tar_pipe(src: str, dst: str, select: list[str]) -> None:
    """`tar -C src -cf - SELECT | tar -C dst -xpf -` (tar must be installed; `select`: the members, or how to
    read them from a list); SandboxError saying what tar said when it fails."""
    if _TAR is None:
        raise SandboxError(f"could not copy {src} to {dst}: tar is not installed")
    with tempfile.TemporaryFile() as err:
        writer = subprocess.Popen([_TAR, "--format=posix", "-C", src, "-cf", "-", *select],
                                  stdout=subprocess.PIPE, stderr=err)
        try:
            reader = subprocess.run([_TAR, "-C", dst, "-xpf", "-"], stdin=writer.stdout, stderr=err)
        finally:
            writer.stdout.close()  # type: ignore[union-attr]
            writer.wait()
        # tar's 1 when creating: a file changed while it was read (cp -a copies such a file silently too)
        if writer.returncode not in (0, 1) or reader.returncode != 0:
            err.seek(0)
            said = err.read().decode("utf-8", "replace").strip()
            raise SandboxError(f"could not copy {src} to {dst}: {said[:400] or 'tar failed'}")


def _run_cp(argv: list[str], src: str, dst: str, cwd: str | None = None) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", cwd=cwd)
    if proc.returncode != 0:
        raise SandboxError(f"could not copy {src} to {dst}: {proc.stderr.strip()[:400]}")


def force_rmtree(path: str) -> None:
    """Remove a tree even when a command made parts of it read-only."""
    if not os.path.lexists(path):
        return

    def onerror(func, p, exc):  # noqa: ARG001
        try:
            parent = os.path.dirname(p)
            os.chmod(parent, 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, onerror=onerror)
            else:
                os.unlink(p)
        except FileNotFoundError:
            pass

    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, onerror=onerror)
    else:
        os.unlink(path)


@dataclass
class Entry:
    kind: str
    ino: int
    mode: int  # permission bits (S_IMODE)
    mtime_ns: int
    uid: int
    gid: int


class Tree:
    """An immutable directory tree and its listing."""

    def __init__(self, path: str, listing: dict[str, Entry] | None = None, owned: bool = True) -> None:
        self.path = path
        self.owned = owned  # removed when released
        self.refs = 0
        self._listing = listing  # walked when first needed (an overlay workspace never needs it)

    @property
    def listing(self) -> dict[str, Entry]:
        if self._listing is None:
            self._listing = self._list(self.path)
        return self._listing

    @property
    def has_special(self) -> bool:
        if getattr(self, "_special", None) is None:
            self._special = any(e.kind == OTHER for e in self.listing.values())
        return self._special

    @staticmethod
    def _list(path: str) -> dict[str, Entry]:
        return {rel: Entry(_kind(st.st_mode), st.st_ino, stat.S_IMODE(st.st_mode), st.st_mtime_ns,
                           st.st_uid, st.st_gid)
                for rel, st in walk(path).items()}

    def release(self) -> None:
        self.refs -= 1
        if self.refs <= 0 and self.owned:
            force_rmtree(self.path)


# manifest value: (workspace inode, workspace ctime_ns, source tree, source inode)
Manifest = dict[str, tuple[int, int, Tree, int]]

_IS_ROOT = os.geteuid() == 0


def _copy_entry(src: str, dst: str, e: Entry) -> None:
    """Copy one file or symlink with its metadata (mode, times, owner when root)."""
    if e.kind == LINK:
        os.symlink(os.readlink(src), dst)
        if _IS_ROOT:
            os.lchown(dst, e.uid, e.gid)
        os.utime(dst, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)
        return
    shutil.copyfile(src, dst, follow_symlinks=False)
    if _IS_ROOT:
        os.chown(dst, e.uid, e.gid)
    os.chmod(dst, e.mode)
    os.utime(dst, ns=(e.mtime_ns, e.mtime_ns))


class Workspace:
    """A writable copy of a tree, resettable to any tree of the same filesystem."""

    #: above this share of changed entries a reset copies the whole tree with `cp -a` instead
    FULL_COPY_RATIO = 0.4

    def __init__(self, path: str, tree: Tree) -> None:
        self.path = path
        self.manifest: Manifest = {}
        self._full_copy(tree)

    # -- building blocks ----------------------------------------------------------------------------
    def _full_copy(self, tree: Tree) -> None:
        force_rmtree(self.path)
        cp_a(tree.path, self.path)
        self._rebuild_manifest(tree)

    def _rebuild_manifest(self, tree: Tree) -> None:
        cur = walk(self.path)
        m: Manifest = {}
        for rel, st in cur.items():
            e = tree.listing.get(rel)
            if e is not None and e.kind != DIR and e.kind == _kind(st.st_mode):
                m[rel] = (st.st_ino, st.st_ctime_ns, tree, e.ino)
        self.manifest = m

    def _unchanged(self, rel: str, st: os.stat_result) -> tuple[Tree, int] | None:
        """The (tree, inode) this workspace entry is still an exact copy of, if any."""
        m = self.manifest.get(rel)
        if m is not None and m[0] == st.st_ino and m[1] == st.st_ctime_ns:
            return m[2], m[3]
        return None

    # -- reset ----------------------------------------------------------------------------------------
    def reset(self, tree: Tree) -> None:
        if tree.has_special:
            self._full_copy(tree)
            return
        try:
            cur = walk(self.path)
        except OSError:
            self._full_copy(tree)
            return
        want = tree.listing
        delete: list[str] = []
        copy: list[str] = []
        mkdirs: list[str] = []
        for rel, st in cur.items():
            e = want.get(rel)
            k = _kind(st.st_mode)
            if e is None or e.kind != k or k == OTHER:
                delete.append(rel)
        deleted = set(delete)
        for rel, e in want.items():
            st = cur.get(rel)
            if st is None or rel in deleted:
                (mkdirs if e.kind == DIR else copy).append(rel)
            elif e.kind != DIR:
                u = self._unchanged(rel, st)
                if u is None or u[1] != e.ino:
                    copy.append(rel)
        if len(copy) + len(delete) > self.FULL_COPY_RATIO * max(len(want), 1):
            self._full_copy(tree)
            return
        try:
            self._apply(tree, cur, delete, copy, mkdirs)
        except OSError:
            self._full_copy(tree)

    def _apply(self, tree: Tree, cur: dict[str, os.stat_result], delete: list[str], copy: list[str],
               mkdirs: list[str]) -> None:
        ws, src = self.path, tree.path
        touched_dirs: set[str] = set()
        # deepest first; a deleted directory takes its contents with it
        gone: set[str] = set()
        for rel in sorted(delete, key=lambda r: -r.count("/")):
            p = os.path.join(ws, rel)
            if os.path.lexists(p):
                force_rmtree(p)
            gone.add(rel)
            self.manifest.pop(rel, None)
            touched_dirs.add(os.path.dirname(rel))
        for rel in sorted(mkdirs, key=lambda r: r.count("/")):
            os.mkdir(os.path.join(ws, rel), 0o700)
            touched_dirs.add(rel)
            touched_dirs.add(os.path.dirname(rel))
        for rel in copy:
            e = tree.listing[rel]
            dst = os.path.join(ws, rel)
            if os.path.lexists(dst):
                os.unlink(dst)
            _copy_entry(os.path.join(src, rel), dst, e)
            st = os.lstat(dst)
            self.manifest[rel] = (st.st_ino, st.st_ctime_ns, tree, e.ino)
            touched_dirs.add(os.path.dirname(rel))
        # entries deleted as part of a deleted directory must leave the manifest too
        if gone:
            for rel in [r for r in self.manifest if r not in tree.listing]:
                self.manifest.pop(rel, None)
        # directory modes (a command may have chmod-ed any directory) and times of the ones we touched
        for rel, e in tree.listing.items():
            if e.kind != DIR:
                continue
            st = cur.get(rel)
            p = os.path.join(ws, rel)
            if rel in touched_dirs or st is None or stat.S_IMODE(st.st_mode) != e.mode or rel in gone:
                os.chmod(p, e.mode)
                if _IS_ROOT and (st is None or st.st_uid != e.uid or st.st_gid != e.gid):
                    os.lchown(p, e.uid, e.gid)
        for rel in sorted(touched_dirs, key=lambda r: -r.count("/")):
            e = tree.listing.get(rel) if rel else None
            if e is not None:
                os.utime(os.path.join(ws, rel), ns=(e.mtime_ns, e.mtime_ns))

    # -- snapshot ---------------------------------------------------------------------------------------
    def snapshot(self, dest: str) -> Tree:
        """Copy the workspace into a new immutable tree at `dest`, hard-linking unchanged files."""
        cur = walk(self.path)
        if any(_kind(st.st_mode) == OTHER for st in cur.values()):
            cp_a(self.path, dest)
            tree = Tree(dest)
            self._rebuild_manifest(tree)
            return tree
        # the whole workspace unchanged from one tree: share that tree
        srcs = set()
        same = True
        for rel, st in cur.items():
            if stat.S_ISDIR(st.st_mode):
                continue
            u = self._unchanged(rel, st)
            if u is None:
                same = False
                break
            srcs.add(id(u[0]))
        if same and len(srcs) <= 1:
            base = next((m[2] for m in self.manifest.values()), None)
            if base is not None and self._dirs_match(base, cur) and \
                    sum(1 for e in base.listing.values() if e.kind != DIR) == \
                    sum(1 for st in cur.values() if not stat.S_ISDIR(st.st_mode)):
                return base
        os.mkdir(dest, 0o700)
        listing: dict[str, Entry] = {}
        new_manifest: Manifest = {}
        pending: list[tuple[str, os.stat_result]] = []
        for rel in sorted(cur, key=lambda r: r.count("/")):
            st = cur[rel]
            k = _kind(st.st_mode)
            d = os.path.join(dest, rel)
            if k == DIR:
                os.mkdir(d, 0o700)
                listing[rel] = Entry(DIR, 0, stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, st.st_gid)
                pending.append((rel, st))
                continue
            u = self._unchanged(rel, st)
            if u is not None:
                src_tree, ino = u
                os.link(os.path.join(src_tree.path, rel), d, follow_symlinks=False)
                e = src_tree.listing[rel]
                listing[rel] = e
                new_manifest[rel] = (st.st_ino, st.st_ctime_ns, None, ino)  # tree filled in below
                continue
            e = Entry(k, 0, stat.S_IMODE(st.st_mode), st.st_mtime_ns, st.st_uid, st.st_gid)
            _copy_entry(os.path.join(self.path, rel), d, e)
            e.ino = os.lstat(d).st_ino
            listing[rel] = e
            new_manifest[rel] = (st.st_ino, st.st_ctime_ns, None, e.ino)
        for rel, st in sorted(pending, key=lambda x: -x[0].count("/")):
            d = os.path.join(dest, rel)
            os.chmod(d, stat.S_IMODE(st.st_mode))
            if _IS_ROOT:
                os.lchown(d, st.st_uid, st.st_gid)
            os.utime(d, ns=(st.st_mtime_ns, st.st_mtime_ns))
            listing[rel].ino = os.lstat(d).st_ino
        tree = Tree(dest, listing)
        self.manifest = {rel: (a, b, tree, ino) for rel, (a, b, _t, ino) in new_manifest.items()}
        return tree

    def _dirs_match(self, tree: Tree, cur: dict[str, os.stat_result]) -> bool:
        for rel, st in cur.items():
            if stat.S_ISDIR(st.st_mode):
                e = tree.listing.get(rel)
                if e is None or e.kind != DIR or e.mode != stat.S_IMODE(st.st_mode):
                    return False
        for rel, e in tree.listing.items():
            if e.kind == DIR and rel not in cur:
                return False
        return True

    def live(self) -> list[Tree]:
        """The trees this workspace's files are still copies of (kept alive by the sandbox's collection)."""
        return list({id(m[2]): m[2] for m in self.manifest.values()}.values())

    def close(self) -> None:
        force_rmtree(self.path)
        self.manifest = {}


def prepare_copy(src: str, dest: str, skip: list[str]) -> None:
    """Copy a repository directory `src` to new directory `dest` (`copy_into`), leaving out the top-level
    names in `skip` (an empty directory stands in for each, as a mount point)."""
    os.mkdir(dest, 0o700)
    if not skip:
        copy_into(src, dest, ["."])
        return
    st = os.stat(src)
    names = [n for n in os.listdir(src) if n not in skip]
    if names:
        copy_into(src, dest, names)
    for n in skip:
        os.mkdir(os.path.join(dest, n), 0o755)
    os.chmod(dest, stat.S_IMODE(st.st_mode))
    if _IS_ROOT:
        os.chown(dest, st.st_uid, st.st_gid)
    os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns))



# -- standalone use inside a container ----------------------------------------------------------------------

STATE_FORMAT = 2  # bump when Tree / Workspace / Entry change shape


def main(argv: list[str]) -> int:
    """`python3 _tree.py snapshot|reset ROOT STATE_DIR NAME`: snapshots of ROOT kept under STATE_DIR/snaps.

    The workspace is ROOT itself. The state (snapshot trees, manifest) is pickled in STATE_DIR between calls.
    """
    import pickle
    import sys
    import uuid

    if len(argv) != 4 or argv[0] not in ("snapshot", "reset"):
        print("usage: _tree.py snapshot|reset ROOT STATE_DIR NAME", file=sys.stderr)
        return 2
    op, root, state_dir, name = argv
    state_file = os.path.join(state_dir, "tree-state.pickle")
    snaps_dir = os.path.join(state_dir, "snaps")
    os.makedirs(snaps_dir, exist_ok=True)
    state = None
    if os.path.exists(state_file):
        try:
            with open(state_file, "rb") as fh:
                state = pickle.load(fh)
        except Exception:  # noqa: BLE001 - a state from another ssrkit version: start over
            state = None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            state = None
    if state is None:
        state = {"format": STATE_FORMAT, "snaps": {}, "ws": None, "owned": []}
    ws: Workspace | None = state["ws"]
    snaps: dict = state["snaps"]
    if op == "snapshot":
        dest = os.path.join(snaps_dir, uuid.uuid4().hex[:12])
        if ws is None:
            cp_a(root, dest)
            tree = Tree(dest)
            ws = Workspace.__new__(Workspace)
            ws.path = root
            ws._rebuild_manifest(tree)
        else:
            tree = ws.snapshot(dest)
        if tree.path == dest:
            state["owned"].append(tree)
        snaps[name] = tree
    else:
        if name not in snaps or ws is None:
            print(f"no snapshot named {name!r}", file=sys.stderr)
            return 3
        ws.reset(snaps[name])
    live = {id(t) for t in snaps.values()} | {id(m[2]) for m in ws.manifest.values()}
    keep = []
    for t in state["owned"]:
        if id(t) in live:
            keep.append(t)
        else:
            force_rmtree(t.path)
    state["owned"] = keep
    state["ws"] = ws
    tmp = state_file + ".tmp"
    with open(tmp, "wb") as fh:
        pickle.dump(state, fh, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, state_file)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
