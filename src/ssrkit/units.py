"""The units of work as functions an executor can run anywhere (see `executor.py`).

Each takes its inputs as `ArtifactRef`/`SourceRef` and returns data. Given references to this machine's
paths (the local executor) a unit works on the artifact in place, exactly as before the seam existed; given
packed ones (Ray) it works on a scratch copy on its node and returns what it made — with the scratch paths
replaced by the driver's — for the driver to write. Nothing here writes into a driver's directory.
"""

from __future__ import annotations

import json
import os
import shutil
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .artifact import Artifact
from .executor import ArtifactRef, Scratch, SourceRef, read_tree, relabel
from .sandbox import SandboxOptions
from .source import RepoSource


def _scratch(ref: ArtifactRef):
    return Scratch() if ref.files is not None else nullcontext(None)


def _mapping(path: Path, ref: ArtifactRef, source: RepoSource, sref: SourceRef) -> dict[str, str]:
    out = {str(path): ref.origin}
    if source.kind == "local" and sref.source.kind == "local":
        out[str(source.path)] = str(sref.source.path)
    return out


def _relabel_bytes(files: dict[str, bytes], mapping: dict[str, str]) -> dict[str, bytes]:
    pairs = [(k.encode(), v.encode()) for k, v in mapping.items() if k and k != v]
    out = {}
    for rel, data in files.items():
        for old, new in pairs:
            data = data.replace(old, new)
        out[rel] = data
    return out


# -- validate one artifact ------------------------------------------------------------------------------

@dataclass
class ValidatorSpec:
    """What a node needs to build the driver's Validator (one per worker process, kept for its cache)."""

    settings: Any
    backend: str
    options: SandboxOptions


_validators: dict[str, Any] = {}


def _validator(spec: Any):
    from .validate import Validator

    if isinstance(spec, Validator):
        return spec
    key = repr(spec)
    if key not in _validators:
        # one sandbox slot per unit: the inverse-mutation runs of an artifact share it
        _validators[key] = Validator(replace(spec.settings, jobs=1), backend=spec.backend, options=spec.options)
    return _validators[key]


def validate_unit(spec: Any, ref: ArtifactRef, sref: SourceRef):
    """The Report of one artifact (not written)."""
    validator = _validator(spec)
    with _scratch(ref) as scratch:
        path = ref.materialize(scratch) if scratch is not None else Path(ref.origin)
        source = sref.materialize()
        report = validator.validate(Artifact(path), source)
    report.source = sref.source.to_dict()
    return relabel(report, _mapping(path, ref, source, sref))


# -- run (or re-grade) one solver attempt -----------------------------------------------------------

def attempt_unit(spec: Any, ref: ArtifactRef, sref: SourceRef, solver: Any, name: str, expect: Any,
                 hide: list[str] | None) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """Run attempt `name` (or re-grade it when `solver` is None): (its eval.json, its files when they
    must be written by the driver — None when it was made in place)."""
    from .artifact import EVAL
    from .attempts import attempt_dir
    from .solve import Engine

    engine = spec if isinstance(spec, Engine) else Engine(spec)
    if ref.files is None:
        art = Artifact(ref.origin)
        if solver is None:
            return engine.regrade_attempt(art, sref.source, name, expect), None
        return engine.run_attempt(art, sref.source, solver, name, expect, hide), None
    with Scratch() as scratch:
        path = ref.materialize(scratch)
        art = Artifact(path)
        source = sref.materialize()
        if solver is None:
            record = engine.regrade_attempt(art, source, name, expect)
        else:
            # the scratch copy, and the driver's artifact paths when this node can see them (one machine)
            here = sorted({p for p in [*engine.hidden_paths([art]), *(hide or [])] if os.path.exists(p)})
            record = engine.run_attempt(art, source, solver, name, expect, here)
        files = read_tree(attempt_dir(art, name))
    mapping = _mapping(path, ref, source, sref)
    record = relabel(record, mapping)
    files = _relabel_bytes(files, mapping)
    files[EVAL] = (json.dumps(record, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode()
    return record, files


# -- higher-order: stack one artifact's failed fixes on its bug ---------------------------------------

def combine_unit(backend: str, options: SandboxOptions, ref: ArtifactRef, sref: SourceRef,
                 todo: list[tuple[str, str]], settings: Any) -> list[tuple[str, str | None, str | None]]:
    """For each (attempt, code diff): (attempt, combined bug diff, None) or (attempt, None, why not)."""
    from .higher_order import combine_fixes
    from .sandbox import open_sandbox

    with _scratch(ref) as scratch:
        path = ref.materialize(scratch) if scratch is not None else Path(ref.origin)
        source = sref.materialize()
        with open_sandbox(source, backend, options) as sb:
            out = combine_fixes(sb, Artifact(path), todo, settings)
    return relabel(out, _mapping(path, ref, source, sref))


# -- one LLM injection (and its validation) --------------------------------------------------------

@dataclass
class LLMInjection:
    """What every injection of one `inject --agent llm` run shares."""

    source: SourceRef
    client: Any
    mixture: dict[str, float]
    thresholds: Any
    agent: Any
    base_commit: str | None
    timeout: float
    exclude_tests: list[str]
    backend: str
    options: SandboxOptions | None
    validator: Any  # a Validator, a ValidatorSpec, or None (no validation)


def llm_injection_unit(env: LLMInjection, ref: ArtifactRef, strategy: str, seed: int,
                       reused: bool) -> tuple[str, str | None, dict[str, bytes] | None]:
    """Run one injection into `ref`'s directory (unless `reused`: it ended earlier) and validate what it
    made: (exit status, error, the directory's files when the driver must write them)."""
    from .artifact import METADATA, TRAJECTORY
    from .fsutil import read_json
    from .inject.llm import run_llm_injection
    from .sandbox import open_sandbox
    from .validate import write_report

    with _scratch(ref) as scratch:
        d = ref.materialize(scratch) if scratch is not None else Path(ref.origin)
        source = env.source.materialize()
        if not reused:
            if scratch is not None:
                shutil.rmtree(d)  # run_llm_injection makes the directory itself
            with open_sandbox(source, env.backend, env.options) as sb:
                result = run_llm_injection(sb, env.client, out_dir=d, strategy=strategy, mixture=env.mixture,
                                           thresholds=env.thresholds, seed=seed, config=env.agent,
                                           source=env.source.source, base_commit=env.base_commit,
                                           test_timeout=env.timeout, exclude_tests=env.exclude_tests)
            status, error = result.exit_status, result.error
        else:
            traj = read_json(d / TRAJECTORY) if (d / TRAJECTORY).is_file() else {}
            status, error = traj.get("exit_status", "submitted"), traj.get("error")
        if env.validator is not None and (d / METADATA).is_file():
            art = Artifact(d)
            if art.validation is None:
                report = relabel(_validator(env.validator).validate(art, source), _mapping(d, ref, source, env.source))
                report.source = env.source.source.to_dict()
                write_report(art, report)
        files = read_tree(d) if scratch is not None else None
    mapping = _mapping(d, ref, source, env.source)
    return relabel(status, mapping), relabel(error, mapping), _relabel_bytes(files, mapping) if files else files


# -- one candidate of the procedural injector --------------------------------------------------------

@dataclass
class CandidateEnv:
    """What evaluating any candidate of one procedural `inject` run needs, as data."""

    source: SourceRef
    seed: int
    settings: Any  # validate.Settings
    repo: Any  # inject.candidates.RepoView, `for_evaluation()`: no source texts
    base_commit: str | None
    screen_timeout: float | None
    existing: dict[str, Any]  # bug hash -> inject.evaluate.Existing
    backend: str
    options: SandboxOptions | None
    staging: str  # the driver's staging directory


def candidate_unit(env: CandidateEnv, cand: Any) -> tuple[Any, dict[str, bytes] | None]:
    """One candidate evaluated in a fresh sandbox of this machine: (its Outcome, the files of the artifact
    it wrote — this machine's paths replaced by the driver's — for the driver to write into staging)."""
    from .inject.evaluate import Evaluator
    from .sandbox import open_sandbox

    with Scratch() as scratch:
        source = env.source.materialize()
        ev = Evaluator(source, scratch, seed=env.seed, settings=env.settings, label=env.source.source,
                       opener=lambda src: open_sandbox(src, env.backend, env.options))
        ev.repo, ev.base_commit, ev.screen_timeout = env.repo, env.base_commit, env.screen_timeout
        ev.existing = env.existing
        try:
            outcome = ev.evaluate(cand)
        finally:
            ev.close()
        mapping = _mapping(scratch, ArtifactRef(env.staging), source, env.source)  # scratch stands for staging
        files = None
        if outcome.artifact is not None and outcome.artifact.is_relative_to(scratch):
            files = _relabel_bytes(read_tree(outcome.artifact), mapping)
            outcome.artifact = Path(env.staging) / outcome.artifact.relative_to(scratch)
    return relabel(outcome, mapping), files
