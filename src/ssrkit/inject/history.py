"""History reverts: past commits that changed code and tests, undone file by file (SPEC §4).

A commit that touched both code and test files is usually a fix or a feature with its regression tests.
Restoring the code files it changed to their content before it (whole-file revert) brings the old
behaviour back while today's tests still expect the new one. Reverting whole files also undoes later
edits to them; candidates that no longer import are discarded by the pre-screen.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..sandbox.base import Sandbox
from ..validate import is_test_like


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    code_files: tuple[str, ...]  # Python code files the commit modified
    test_files: tuple[str, ...]


def list_commits(sandbox: Sandbox, test_patterns: list[str], *, rev: str = "HEAD", limit: int = 500) -> list[Commit]:
    """Non-merge commits reachable from `rev` that modified code files and touched test files, newest first."""
    cmd = (f"git log --no-merges --no-renames -n {int(limit)} --format='%x00%H%x09%P%x09%s' --name-status "
           f"{shlex.quote(rev)} --")
    res = sandbox.run(cmd, timeout=120, env={"GIT_OPTIONAL_LOCKS": "0"})
    if not res.ok:
        return []
    out = []
    for block in res.output.split("\0")[1:]:
        lines = block.strip("\n").splitlines()
        if not lines:
            continue
        sha, parents, subject = (lines[0].split("\t", 2) + ["", ""])[:3]
        if not parents.strip():
            continue  # the root commit has nothing to revert to
        code, tests = [], []
        for line in lines[1:]:
            parts = line.split("\t")
            if len(parts) < 2:
                continue
            status, path = parts[0], parts[-1]
            if is_test_like(path, test_patterns):
                tests.append(path)
            elif status.startswith("M") and path.endswith(".py"):
                code.append(path)
        if code and tests:
            out.append(Commit(sha, subject, tuple(sorted(code)), tuple(sorted(tests))))
    return out


def file_before(sandbox: Sandbox, commit: Commit, path: str) -> str | None:
    """The content of `path` in the parent of `commit` (None when it did not exist or is not text)."""
    dest = sandbox.scratch_path("history-file")
    res = sandbox.run(f"git show {shlex.quote(commit.sha + '^:' + path)} > {shlex.quote(dest)}", timeout=60,
                      env={"GIT_OPTIONAL_LOCKS": "0"})
    if not res.ok:
        return None
    try:
        return sandbox.read_file(dest).decode("utf-8")
    except (FileNotFoundError, UnicodeDecodeError):
        return None
