"""Repository sources: where the code under test comes from.

A source is either a local git repository directory or a Docker image holding the repository (and its
dependencies) at `workdir`. Artifacts record their source in `artifact.toml` so later stages need no flags.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SsrkitError

#: where the repository is inside an image, unless said otherwise (`--workdir`, `[repo] workdir`)
DEFAULT_WORKDIR = "/testbed"


@dataclass(frozen=True)
class RepoSource:
    kind: str  # "local" or "image"
    path: str | None = None  # local: absolute path of the repository directory
    image: str | None = None  # image: Docker image name
    workdir: str = DEFAULT_WORKDIR  # image: repository root inside the image
    #: named by an artifact.toml (not by a flag): must be a git repository before anything is copied from it
    from_metadata: bool = field(default=False, compare=False, repr=False)

    @classmethod
    def local(cls, path: str | Path) -> "RepoSource":
        p = Path(path).expanduser().resolve()
        if not p.is_dir():
            raise SsrkitError(f"repository {path} does not exist or is not a directory")
        return cls(kind="local", path=str(p))

    @classmethod
    def from_image(cls, image: str, workdir: str = DEFAULT_WORKDIR) -> "RepoSource":
        return cls(kind="image", image=image, workdir=workdir)

    @property
    def label(self) -> str:
        return self.path if self.kind == "local" else f"{self.image}:{self.workdir}"

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "local":
            return {"kind": "local", "path": self.path}
        return {"kind": "image", "image": self.image, "workdir": self.workdir}

    @classmethod
    def from_dict(cls, data: dict[str, Any], relative_to: Path | None = None) -> "RepoSource":
        kind = data.get("kind", "local")
        if kind == "local":
            raw = data.get("path")
            if not raw:
                raise SsrkitError("artifact.toml: [repo] has kind 'local' but no 'path'")
            p = Path(raw).expanduser()
            if not p.is_absolute() and relative_to is not None:
                p = relative_to / p
            return cls(kind="local", path=str(p.resolve()), from_metadata=True)
        if kind == "image":
            if not data.get("image"):
                raise SsrkitError("artifact.toml: [repo] has kind 'image' but no 'image'")
            return cls(kind="image", image=data["image"], workdir=data.get("workdir", DEFAULT_WORKDIR))
        raise SsrkitError(f"artifact.toml: unknown repo kind {kind!r} (expected 'local' or 'image')")


def require_git_toplevel(path: Path, role: str = "artifact.toml: [repo] path",
                         fix: str = "an artifact's repository must be a git work tree (or an image) — fix "
                                    "artifact.toml or pass --repo PATH") -> None:
    """SsrkitError unless `path` is the top directory of a git work tree: what artifact.toml may name, and
    what `inject` needs (the history strategy reads git log, diffs are git diffs, the workspace is the tree).

    Checked where a sandbox is opened or a fingerprint taken on a source from artifact.toml, so that no
    directory (`/`, a home directory) is walked or copied on an artifact's say-so. `role` names the path in
    the message, `fix` says what to do about it."""
    proc = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          errors="replace")
    top = proc.stdout.strip()
    if proc.returncode != 0 or Path(top).resolve() != path:
        where = f"; its repository is {top}" if proc.returncode == 0 and top else ""
        raise SsrkitError(f"{role} {path} is not the top of a git repository{where}; {fix}")


def git(path: str | Path, *args: str, check: bool = True) -> str:
    """Run git in `path` and return stdout; raise SsrkitError with git's message on failure."""
    proc = subprocess.run(
        ["git", "-C", str(path), *args], capture_output=True, text=True, errors="replace"
    )
    if check and proc.returncode != 0:
        raise SsrkitError(f"git {' '.join(args)} failed in {path}: {proc.stderr.strip()}")
    return proc.stdout


def head_commit(path: str | Path) -> str | None:
    out = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() if out.returncode == 0 else None
