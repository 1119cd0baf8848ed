"""What a local repository directory holds beyond its commit: status, fingerprint, bulky ignored dirs."""

from __future__ import annotations

import glob
import hashlib
import os
import stat
import subprocess

#: top-level git-ignored directories that the bubblewrap backend does not copy into workspaces but mounts
#: read-only from the original at the same place (virtual environments and tool caches can be hundreds of
#: megabytes and are the toolchain, not the code under test)
JUNK_NAMES = (".tox", ".nox", "node_modules")

_GIT_ENV = {"GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}


def _git(path: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(_GIT_ENV)
    return subprocess.run(["git", "-C", path, *args], capture_output=True, env=env)


def is_git_repo(path: str) -> bool:
    return _git(path, "rev-parse", "--show-toplevel").returncode == 0


def status_entries(path: str) -> list[tuple[str, str]] | None:
    """`git status --porcelain --ignored` as (XY code, path) pairs; None when `path` is not a git work tree.

    Untracked and ignored directories are reported collapsed (`dir/`), like git shows them by default.
    """
    proc = _git(path, "status", "--porcelain=v1", "-z", "--ignored=traditional", "--untracked-files=normal")
    if proc.returncode != 0:
        return None
    out: list[tuple[str, str]] = []
    parts = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    i = 0
    while i < len(parts):
        item = parts[i]
        i += 1
        if len(item) < 4:
            continue
        code, p = item[:2], item[3:]
        if code[0] in "RC":  # rename/copy: the next field is the source path
            i += 1
        out.append((code, p))
    return out


def is_venv(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "pyvenv.cfg")) or os.path.isdir(os.path.join(path, "conda-meta"))


def junk_dirs(path: str, entries: list[tuple[str, str]] | None) -> list[str]:
    """Top-level ignored directories worth mounting instead of copying (virtualenvs, .tox, node_modules)."""
    if not entries:
        return []
    out = []
    for code, p in entries:
        if code != "!!":
            continue
        name = p.rstrip("/")
        if "/" in name:
            continue
        full = os.path.join(path, name)
        if os.path.isdir(full) and not os.path.islink(full) and (name in JUNK_NAMES or is_venv(full)):
            out.append(name)
    return sorted(out)


def _stat_key(full: str) -> str:
    try:
        st = os.lstat(full)
    except OSError:
        return "-"
    return f"{stat.S_IFMT(st.st_mode):o}:{stat.S_IMODE(st.st_mode):o}:{st.st_size}:{st.st_mtime_ns}"


def _tree_key(full: str, h: "hashlib._Hash", limit: int = 200_000) -> None:
    """Feed size/mtime of everything under directory `full` into `h` (bounded)."""
    n = 0
    for dirpath, dirnames, filenames in os.walk(full):
        dirnames.sort()
        h.update(f"D{os.path.relpath(dirpath, full)}:{_stat_key(dirpath)}\n".encode("utf-8", "surrogateescape"))
        for f in sorted(filenames):
            h.update(f"F{f}:{_stat_key(os.path.join(dirpath, f))}\n".encode("utf-8", "surrogateescape"))
            n += 1
            if n > limit:
                h.update(b"...truncated\n")
                return


def local_fingerprint(path: str, entries: list[tuple[str, str]] | None | bool = False) -> str:
    """A cheap key of a local repository's state as a workspace would copy it.

    HEAD commit, `git status --porcelain --ignored`, and size/mtime of every changed, untracked or ignored
    entry (directories walked; virtualenvs and tool caches by their top entry only); the absolute path is
    part of the key since the workspace appears there. Not a git repository: size/mtime of every file.
    `entries`: the result of `status_entries(path)` when the caller already has it.
    """
    path = os.path.abspath(path)
    h = hashlib.sha256()
    h.update(f"path:{path}\n".encode("utf-8", "surrogateescape"))
    if entries is False:
        entries = status_entries(path)
    if entries is None:
        h.update(b"nogit\n")
        _tree_key(path, h)
        return h.hexdigest()[:32]
    head = _git(path, "rev-parse", "HEAD")
    h.update(b"head:" + (head.stdout.strip() if head.returncode == 0 else b"none") + b"\n")
    junk = set(junk_dirs(path, entries))
    for code, p in sorted(entries, key=lambda e: e[1]):
        full = os.path.join(path, p.rstrip("/"))
        h.update(f"{code} {p} {_stat_key(full)}\n".encode("utf-8", "surrogateescape"))
        if p.rstrip("/") in junk:
            # installs and uninstalls add or remove entries of site-packages, which changes its mtime
            for sp in sorted(glob.glob(os.path.join(full, "lib", "python*", "site-packages"))):
                h.update(f"  {sp} {_stat_key(sp)}\n".encode("utf-8", "surrogateescape"))
        elif p.endswith("/") and os.path.isdir(full) and not os.path.islink(full):
            _tree_key(full, h)
    return h.hexdigest()[:32]
