"""One exported task (`Task`): what every format is made from — a valid artifact, its snapshot and its grading
data — and the task image that holds the snapshot (`dockerfile`)."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from ... import patch as patches
from ...errors import SsrkitError
from ...sandbox.image import BASE_IMAGE, INSTALL_STEP
from ...solve import JUNK
from ...solve.grade import GradeSettings
from ...solve.solvers import task_from_weaken_diff
from ...store.artifact import BUG_DIFF, WEAKEN_DIFF, Artifact
from ...store.config import load_config
from ...store.source import DEFAULT_WORKDIR, RepoSource
from ...verdict.patterns import SHADOW_NAMES
from .grader import TASK_CONTAINER_ENV
from .snapshot import _blob, _git, snapshot_commit

BUNDLE = "repo.bundle"


@dataclass
class Task:
    """What every export format is made from: one valid artifact, its snapshot and its grading data."""

    artifact: Artifact
    instance_id: str
    repo_name: str
    source: RepoSource
    original_commit: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    grading: dict[str, Any]

    @property
    def image(self) -> str:
        return swebench_image(self.instance_id)

    @property
    def test_files_in_patch(self) -> list[str]:
        return patches.touched_files(self.test_patch, "test.patch")


def swebench_image(instance_id: str, namespace: str = "swebench") -> str:
    """The image name SWE-bench derives for an instance (its check_task_repo insists on it)."""
    return f"{namespace}/sweb.eval.x86_64.{instance_id}:latest".lower().replace("__", "_1776_")


def _safe_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"


def _repo_name(source: RepoSource) -> str:
    raw = source.path if source.kind == "local" else source.image
    return _safe_id(Path(str(raw).rstrip("/")).name.replace(":", "_")) or "repo"


def make_task(artifact: Artifact, source: RepoSource | None = None,
              settings: GradeSettings | None = None) -> Task:
    """The exported form of a valid artifact (SsrkitError, saying what to do, otherwise)."""
    validation = artifact.current_validation()
    if not validation.get("valid"):
        raise SsrkitError(f"{artifact.path}: only valid artifacts can be exported; run `ssrkit validate` first")
    meta = artifact.metadata
    source = source or meta.repo
    if source is None:
        raise SsrkitError(f"{artifact.path}: no repository recorded; pass --repo PATH")
    if source.kind != "local":
        raise SsrkitError(f"{artifact.path}: its repository is the image {source.image}; export needs the local "
                          f"repository to make the task's snapshot: pass --repo PATH")
    settings = settings or GradeSettings()
    bug, weaken = artifact.bug_diff, artifact.weaken_diff
    original = meta.base_commit or _git(source.path, "rev-parse", "HEAD").strip()
    base = snapshot_commit(source.path, original, bug, weaken, artifact.id)
    patch, test_patch = patches.reverse(bug), patches.reverse(weaken)
    f2p, p2p = list(validation["fail_to_pass"]), list(validation["pass_to_pass"])
    bug_touched = patches.touched_files(bug, BUG_DIFF)
    weaken_touched = patches.touched_files(weaken, WEAKEN_DIFF)
    known = list(dict.fromkeys([*artifact.test_files, *bug_touched, *weaken_touched]))
    originals = {}
    for p in known:
        data = _blob(source.path, original, p)
        originals[p] = None if data is None else base64.b64encode(data).decode("ascii")
    grading_data = {
        "workdir": DEFAULT_WORKDIR,
        "base_commit": base,
        "test_script": artifact.test_script,
        "test_parser": artifact.test_parser,
        "test_files": artifact.test_files,
        "timeout": settings.timeout,
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
        "patterns": settings.patterns,
        "guard_shadows": settings.guard_shadows,
        "canary": settings.canary,
        "artifact_touched": list(dict.fromkeys([*bug_touched, *weaken_touched])),
        "weaken_touched": weaken_touched,
        "originals": originals,
        "junk": list(JUNK),
        # the modules a new file must not shadow, as this ssrkit judges them (not the task image's python)
        "shadow_names": sorted(SHADOW_NAMES),
        "to_original": _join_diffs(patch, test_patch),
    }
    name = _repo_name(source)
    return Task(artifact=artifact, instance_id=f"{name}__ssr-{_safe_id(artifact.id)}", repo_name=name,
                source=source, original_commit=original, base_commit=base, patch=patch, test_patch=test_patch,
                problem_statement=task_from_weaken_diff(weaken), fail_to_pass=f2p, pass_to_pass=p2p,
                grading=grading_data)


def _join_diffs(*diffs: str) -> str:
    return "".join(d if d.endswith("\n") else d + "\n" for d in diffs if d.strip())


def make_tasks(artifacts: Iterable[Artifact], source_of: Callable[[Artifact], RepoSource],
               config: Path | None = None) -> tuple[list[Task], int]:
    """The tasks of the valid artifacts among `artifacts`, each graded by the settings of `config` and its
    repository's profile, and how many were skipped as invalid or unvalidated."""
    tasks: list[Task] = []
    skipped = 0
    for art in artifacts:
        if not (art.validation or {}).get("valid"):
            skipped += 1
            continue
        source = source_of(art)
        settings = GradeSettings.from_config(load_config(config, Path(source.path) if source.path else None))
        tasks.append(make_task(art, source, settings))
    return tasks, skipped


def dockerfile(task: Task, base: str = BASE_IMAGE) -> str:
    """The task image: the snapshot (from `repo.bundle` in the build context) at /testbed, installed."""
    return (f"FROM {base}\n"
            f"COPY {BUNDLE} /tmp/ssrkit-{BUNDLE}\n"
            f"RUN git clone -q /tmp/ssrkit-{BUNDLE} {DEFAULT_WORKDIR} "
            f"&& git -C {DEFAULT_WORKDIR} remote remove origin \\\n"
            f"    && rm /tmp/ssrkit-{BUNDLE}\n"
            f"WORKDIR {DEFAULT_WORKDIR}\n"
            f"ENV {TASK_CONTAINER_ENV}=1\n"
            # ssrkit's test scripts call `python`; Debian's python3 comes without that name
            "RUN command -v python >/dev/null 2>&1 || ln -s \"$(command -v python3)\" /usr/local/bin/python\n"
            + INSTALL_STEP.format(workdir=DEFAULT_WORKDIR)
            + f"LABEL ssrkit.instance={task.instance_id} ssrkit.base_commit={task.base_commit}\n")
