"""Export artifacts for other tools: SWE-bench-shaped task instances and SFT chat data.

A SWE-bench instance needs a commit holding the buggy state. ssrkit makes one without touching the user's
working tree or index: the original commit's tree plus both diffs is written with `git apply --cached` on a
private index, committed with `git commit-tree`, and kept alive by a ref `refs/ssrkit/<id>`. Its `patch`
(the reverse of the bug) and `test_patch` (the reverse of the weakening) apply to that commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterator

from . import patch as patches
from .agents.solver import task_from_weaken_diff
from .artifact import Artifact
from .errors import SsrkitError
from .source import RepoSource


def _git(repo: str, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    proc = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, input=stdin,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SsrkitError(f"git {args[0]} failed in {repo}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def buggy_commit(repo: str, base_commit: str, bug_diff: str, weaken_diff: str, artifact_id: str) -> str:
    """Commit original + bug + weakening on top of `base_commit`, leaving the working tree alone."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-export-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"),
               "GIT_AUTHOR_NAME": "ssrkit", "GIT_AUTHOR_EMAIL": "ssrkit@localhost",
               "GIT_COMMITTER_NAME": "ssrkit", "GIT_COMMITTER_EMAIL": "ssrkit@localhost",
               "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
        _git(repo, "read-tree", base_commit, env=env)
        for label, diff in (("bug_inject.diff", bug_diff), ("test_weaken.diff", weaken_diff)):
            p = Path(tmp) / label
            p.write_text(diff if diff.endswith("\n") else diff + "\n")
            proc = subprocess.run(["git", "-C", repo, "apply", "--cached", str(p)], capture_output=True,
                                  text=True, env={**os.environ, **env})
            if proc.returncode != 0:
                raise SsrkitError(patches.explain_apply_error(proc.stderr, label) + f" (at commit {base_commit[:12]})")
        tree = _git(repo, "write-tree", env=env).strip()
        commit = _git(repo, "commit-tree", tree, "-p", base_commit, "-m", f"ssrkit bug {artifact_id}",
                      env=env).strip()
    _git(repo, "update-ref", f"refs/ssrkit/{artifact_id}", commit)
    return commit


def swebench_instance(artifact: Artifact, source: RepoSource | None = None) -> dict[str, Any]:
    """One SWE-bench-shaped instance (FAIL_TO_PASS / PASS_TO_PASS JSON-encoded, as in SWE-bench's data)."""
    validation = artifact.validation
    if not validation or not validation.get("valid"):
        raise SsrkitError(f"{artifact.path}: only valid artifacts can be exported; run `ssrkit validate` first")
    meta = artifact.metadata
    source = source or meta.repo
    if source is None:
        raise SsrkitError(f"{artifact.path}: no repository recorded; pass --repo PATH")
    bug, weaken = artifact.bug_diff, artifact.weaken_diff
    instance: dict[str, Any] = {
        "instance_id": f"{_repo_name(source)}__ssr-{artifact.id}",
        "repo": source.label,
        "patch": patches.reverse(bug),
        "test_patch": patches.reverse(weaken),
        "problem_statement": task_from_weaken_diff(weaken),
        "hints_text": "",
        "FAIL_TO_PASS": json.dumps(validation["fail_to_pass"]),
        "PASS_TO_PASS": json.dumps(validation["pass_to_pass"]),
        "created_at": meta.created,
        "version": "ssrkit",
        "image": source.image if source.kind == "image" else None,
        "test_script": artifact.test_script,
        "test_files": artifact.test_files,
        "strategy": meta.strategy,
        "order": meta.order,
    }
    if source.kind == "local":
        base = meta.base_commit or _git(source.path, "rev-parse", "HEAD").strip()
        instance["original_commit"] = base
        instance["base_commit"] = buggy_commit(source.path, base, bug, weaken, artifact.id)
        instance["environment_setup_commit"] = base
    else:
        instance["base_commit"] = meta.base_commit
    return instance


def _repo_name(source: RepoSource) -> str:
    raw = source.path if source.kind == "local" else source.image
    return Path(str(raw).rstrip("/")).name.replace(":", "_") or "repo"


def sft_examples(artifact: Artifact) -> Iterator[dict[str, Any]]:
    """Chat transcripts of the artifact's successful solver attempts."""
    for d in artifact.attempt_dirs():
        ev = artifact.read_json(f"attempts/{d.name}/eval.json") or {}
        traj = artifact.read_json(f"attempts/{d.name}/trajectory.json")
        if not ev.get("passed") or not traj or not traj.get("messages"):
            continue
        yield {
            "messages": traj["messages"],
            "artifact": artifact.id,
            "attempt": d.name,
            "model": traj.get("model"),
            "exit_status": traj.get("exit_status"),
        }
