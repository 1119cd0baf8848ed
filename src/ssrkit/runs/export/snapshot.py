"""The snapshot every exported task starts from: original + bug + weakening as one parentless commit, made on a
private index under a fixed identity and date (the same artifact always gives the same commit), kept alive by
`refs/ssrkit/<id>` and carried as a git bundle."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from ... import patch as patches
from ...errors import SsrkitError
from ...sandbox.git import GIT_EMAIL, GIT_NAME
from ...store.artifact import BUG_DIFF, WEAKEN_DIFF

BRANCH = "main"

_IDENT = {"GIT_AUTHOR_NAME": GIT_NAME, "GIT_AUTHOR_EMAIL": GIT_EMAIL,
          "GIT_COMMITTER_NAME": GIT_NAME, "GIT_COMMITTER_EMAIL": GIT_EMAIL,
          "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}


def _git(repo: str, *args: str, env: dict[str, str] | None = None, binary: bool = False) -> Any:
    proc = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=not binary,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        err = proc.stderr if not binary else proc.stderr.decode("utf-8", "replace")
        raise SsrkitError(f"git {args[0]} failed in {repo}: {err.strip()[:300]}")
    return proc.stdout


def snapshot_commit(repo: str, base_commit: str, bug_diff: str, weaken_diff: str, artifact_id: str) -> str:
    """Commit original + bug + weakening as a parentless commit (ref `refs/ssrkit/<id>`); the tree is untouched."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-export-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **_IDENT}
        _git(repo, "read-tree", base_commit, env=env)
        for label, diff in ((BUG_DIFF, bug_diff), (WEAKEN_DIFF, weaken_diff)):
            p = Path(tmp) / label
            p.write_text(diff if diff.endswith("\n") else diff + "\n")
            proc = subprocess.run(["git", "-C", repo, "apply", "--cached", str(p)], capture_output=True,
                                  text=True, env={**os.environ, **env})
            if proc.returncode != 0:
                raise SsrkitError(patches.explain_apply_error(proc.stderr, label) + f" (at commit {base_commit[:12]})")
        tree = _git(repo, "write-tree", env=env).strip()
        commit = _git(repo, "commit-tree", tree, "-m", "Initial commit", env=env).strip()
    _git(repo, "update-ref", f"refs/ssrkit/{artifact_id}", commit)
    return commit


def write_bundle(repo: str, artifact_id: str, dest: Path) -> None:
    """`dest`: a git bundle holding only the snapshot, as branch `main` (a clone checks it out)."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-bundle-") as tmp:
        _git(tmp, "init", "-q", "--bare", ".")
        _git(tmp, "fetch", "-q", "--no-tags", repo, f"+refs/ssrkit/{artifact_id}:refs/heads/{BRANCH}")
        _git(tmp, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        _git(tmp, "bundle", "create", "-q", str(dest.resolve()), "HEAD", BRANCH)


def _blob(repo: str, commit: str, path: str) -> bytes | None:
    proc = subprocess.run(["git", "-C", repo, "cat-file", "blob", f"{commit}:{path}"], capture_output=True)
    return proc.stdout if proc.returncode == 0 else None
