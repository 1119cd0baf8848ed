"""The solver's sandbox (SPEC §6) and the fix taken from it.

The solver's sandbox holds the original code with `bug_inject.diff` and `test_weaken.diff` applied; its git
history is removed and replaced by one fresh commit, so neither the past nor the bug is visible.

The fix is the sandbox's diff against that fresh commit (new and deleted files included), computed through a
private git directory in the sandbox's scratch space: whatever the solver does to the repository's own `.git`
(commits, resets, a new `git init`) neither hides nor adds changes."""

from __future__ import annotations

import shlex

from .. import patch as patches
from ..store.artifact import BUG_DIFF, WEAKEN_DIFF, Artifact
from ..errors import PatchError, SsrkitError
from ..sandbox import PRISTINE, Sandbox
from ..sandbox import timeouts
from ..sandbox.git import GIT_IDENTITY


#: Generated junk that never belongs in a fix (kept out of the solver's fresh repository and of the diff).
JUNK = ["__pycache__/", "*.py[cod]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/",
        ".coverage", ".coverage.*", "*.egg-info/"]


_BASE_GIT = "ssrkit-base.git"




def prepare_solver_sandbox(sandbox: Sandbox, artifact: Artifact, *, timeout: float = timeouts.WHOLE_TREE) -> None:
    """original + bug + weaken, history replaced by one fresh commit, a private base for the final diff."""
    sandbox.reset(PRISTINE)
    try:
        sandbox.apply_patch(artifact.bug_diff, label=BUG_DIFF)
        sandbox.apply_patch(artifact.weaken_diff, label=WEAKEN_DIFF)
    except PatchError as e:
        raise SsrkitError(f"{artifact.path}: {e}; the artifact no longer matches its repository — validate it again")
    sandbox.fresh_history(message="Initial commit", timeout=timeout)
    exclude = "\n".join(JUNK) + "\n"
    base = sandbox.scratch_path(_BASE_GIT)
    sandbox.write_file(".git/info/exclude", exclude)
    q = shlex.quote(base)
    res = sandbox.run(
        f"rm -rf {q} && export GIT_DIR={q} GIT_WORK_TREE=\"$PWD\" && git init -q && mkdir -p {q}/info && "
        f"cp .git/info/exclude {q}/info/exclude && git add -A . && git {GIT_IDENTITY} commit -q --no-verify -m base",
        timeout=timeout,
    )
    if not res.ok:
        raise SsrkitError(f"could not record the solver's starting state: {res.output.strip()[:300]}")


def solver_diff(sandbox: Sandbox, *, timeout: float = timeouts.WHOLE_TREE) -> str:
    """The working tree's changes since `prepare_solver_sandbox`, as a `git diff` (binary-safe)."""
    base = shlex.quote(sandbox.scratch_path(_BASE_GIT))
    res = sandbox.run(
        f"export GIT_DIR={base} GIT_WORK_TREE=\"$PWD\" && git add -A . >/dev/null && "
        f"git -c core.quotepath=false diff --cached --no-color --no-ext-diff --no-renames --binary HEAD",
        timeout=timeout, env={"GIT_OPTIONAL_LOCKS": "0"},
    )
    if not res.ok:
        raise SsrkitError(f"could not compute the fix from the solver's sandbox: {res.output.strip()[:300]}")
    return res.output


def task_diff(artifact: Artifact) -> str:
    """What the solver is told: the reversed `test_weaken.diff` (the tests its fix must satisfy)."""
    return patches.reverse(artifact.weaken_diff)
