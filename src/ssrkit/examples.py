"""Example repositories shipped as ``git format-patch`` series.

``examples/repos/<name>/`` holds the history of a small example library as
numbered patch files (``0001-....patch``, ``0002-....patch``, ...).  They are
the test fixtures of the whole project: :func:`materialize` replays them with
``git am`` into real git repositories.

Every commit is made under one fixed identity and a fixed date per commit
(commit *i* is dated ``2024-01-01 12:00 UTC`` plus *i - 1* days), with hooks,
signing and end-of-line conversion disabled, so the resulting commit hashes are
the same on every machine and with every user configuration.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .errors import SsrkitError

__all__ = ["ExampleError", "available", "materialize", "patches"]

AUTHOR_NAME = "Example Maintainer"
AUTHOR_EMAIL = "maintainer@example.invalid"
BASE_DATE = datetime(2024, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
BRANCH = "main"

# stored in the materialized repository's .git/config to recognise it later
_DIGEST_KEY = "ssrkit.example.digest"
_HEAD_KEY = "ssrkit.example.head"

_GIT_CONFIG = [
    f"user.name={AUTHOR_NAME}",
    f"user.email={AUTHOR_EMAIL}",
    "commit.gpgsign=false",
    "core.hooksPath=/dev/null",
    "core.autocrlf=false",
    "core.eol=lf",
    "core.fsmonitor=false",
    "am.threeWay=false",
    "am.keepcr=false",
    "am.messageid=false",
    "apply.whitespace=nowarn",
]


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class ExampleError(SsrkitError):
    """An example repository cannot be found or materialized."""


def available(src: Path) -> list[str]:
    """Names of the example repositories under *src* (folders holding ``*.patch`` files)."""
    src = Path(src)
    if not src.is_dir():
        return []
    return sorted(p.name for p in src.iterdir() if p.is_dir() and any(p.glob("*.patch")))


def patches(src: Path, name: str) -> list[Path]:
    """The patch files of example *name*, in replay order."""
    if not _NAME.match(name):
        raise ExampleError(f"invalid example name {name!r}")
    folder = Path(src) / name
    files = sorted(folder.glob("*.patch"))
    if not files:
        raise ExampleError(f"no example repository {name!r} under {src} (expected {folder}/*.patch)")
    return files


def materialize(src: Path, dest: Path, names: list[str] | None = None) -> list[Path]:
    """Create ``dest/<name>`` as a git repository for each example *name*.

    Idempotent: a ``dest/<name>`` already materialized from the same patches,
    still at the expected HEAD and without changes to tracked files, is left
    alone.  Anything else at ``dest/<name>`` raises :class:`ExampleError`.
    Returns the repository paths in the order of *names* (default: all
    available examples).
    """
    src, dest = Path(src), Path(dest)
    if names is None:
        names = available(src)
        if not names:
            raise ExampleError(f"no example repositories under {src}")
    dest.mkdir(parents=True, exist_ok=True)
    result = []
    for name in names:
        files = patches(src, name)
        digest = _digest(files)
        target = dest / name
        if not (target.exists() or target.is_symlink()):
            _build(files, digest, dest, target)
        _check_existing(target, digest)
        result.append(target)
    return result


def _digest(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        h.update(f.read_bytes())
        h.update(b"\0")
    return h.hexdigest()


def _env(date: datetime | None = None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIT_") and k not in ("EMAIL",)
    }
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
        TZ="UTC",
        GIT_AUTHOR_NAME=AUTHOR_NAME,
        GIT_AUTHOR_EMAIL=AUTHOR_EMAIL,
        GIT_COMMITTER_NAME=AUTHOR_NAME,
        GIT_COMMITTER_EMAIL=AUTHOR_EMAIL,
    )
    if date is not None:
        stamp = date.strftime("%Y-%m-%dT%H:%M:%S+00:00")
        env["GIT_AUTHOR_DATE"] = stamp
        env["GIT_COMMITTER_DATE"] = stamp
    return env


def _git(repo: Path, *args: str, date: datetime | None = None) -> str:
    cmd = ["git"]
    for item in _GIT_CONFIG:
        cmd += ["-c", item]
    cmd += list(args)
    try:
        proc = subprocess.run(
            cmd,
            cwd=repo,
            env=_env(date),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        raise ExampleError("git is not installed or not on PATH") from None
    if proc.returncode != 0:
        raise ExampleError(
            f"git {' '.join(args)} failed in {repo} (exit {proc.returncode}):\n{proc.stderr.strip()}"
        )
    return proc.stdout.strip()


def _build(files: list[Path], digest: str, dest: Path, target: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=dest))
    try:
        _git(tmp, "init", "-q", "--template=")
        _git(tmp, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
        for item in _GIT_CONFIG[2:]:
            key, _, value = item.partition("=")
            _git(tmp, "config", key, value)
        for index, patch in enumerate(files):
            date = BASE_DATE + timedelta(days=index)
            try:
                _git(tmp, "am", "--quiet", "--no-3way", str(patch.resolve()), date=date)
            except ExampleError as exc:
                raise ExampleError(f"patch {patch.name} does not apply: {exc}") from None
            # normalise the author taken from the patch header to the fixed identity and date
            _git(tmp, "commit", "--quiet", "--amend", "--no-edit", "--reset-author", "--allow-empty", date=date)
        head = _git(tmp, "rev-parse", "HEAD")
        _git(tmp, "config", _DIGEST_KEY, digest)
        _git(tmp, "config", _HEAD_KEY, head)
        try:
            tmp.rename(target)
        except OSError:
            if not target.exists():  # pragma: no cover - unexpected rename failure
                raise
            # another process materialized it concurrently; _check_existing decides
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _check_existing(target: Path, digest: str) -> None:
    if target.is_symlink() or not target.is_dir() or not (target / ".git").is_dir():
        raise ExampleError(f"{target} exists but is not an example repository; remove it or choose another destination")
    try:
        recorded = _git(target, "config", "--get", _DIGEST_KEY)
        expected_head = _git(target, "config", "--get", _HEAD_KEY)
    except ExampleError:
        raise ExampleError(
            f"{target} exists but was not materialized from {target.name}'s patches; remove it or choose another destination"
        ) from None
    if recorded != digest:
        raise ExampleError(f"{target} was materialized from another version of the {target.name} patches; remove it to rebuild")
    head = _git(target, "rev-parse", "HEAD")
    if head != expected_head:
        raise ExampleError(f"{target} is at {head[:12]}, not at the expected HEAD {expected_head[:12]}; remove it to rebuild")
    if _git(target, "status", "--porcelain", "--untracked-files=no"):
        raise ExampleError(f"{target} has local changes to tracked files; remove it to rebuild")
