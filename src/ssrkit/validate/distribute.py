"""Validating many artifacts: reuse of up-to-date reports, `jobs` at a time or as units of an executor
(`validate_unit` on a node, with one Validator per worker process kept for its cache)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..store.artifact import ATTEMPTS, Artifact
from ..executor import ArtifactRef, SourceRef, relabel
from ..sandbox import SandboxOptions
from ..store.source import RepoSource
from ..executor.units import path_mapping, scratch_for
from .engine import Report, Validator, previous_report, write_report

if TYPE_CHECKING:
    from ..executor import Executor


def validate_all(
    items: list[tuple[Artifact, RepoSource]],
    validator: Validator,
    *,
    redo: bool = False,
    write: bool = True,
    on_done: Callable[[Artifact, dict[str, Any], bool], None] | None = None,
    executor: "Executor | None" = None,
) -> list[dict[str, Any]]:
    """Validate many artifacts, `jobs` at a time; reuse an up-to-date validation.json unless `redo`.

    Returns the validation.json objects in the order given. `on_done(artifact, result, reused)` is called
    as each finishes (progress bars). Each validation is a unit of `executor` (default: the local thread
    pool of `jobs`); whichever ran it, this process writes the report.
    """
    from ..executor import LocalExecutor, run_units

    results: dict[int, dict[str, Any]] = {}
    todo: list[int] = []
    for i, (artifact, source) in enumerate(items):
        old = None if redo else previous_report(artifact, validator.settings, source, validator.environment)
        if old is not None:
            results[i] = old
            if on_done:
                on_done(artifact, old, True)
        else:
            todo.append(i)
    ex = executor or LocalExecutor(min(validator.settings.jobs, max(1, len(todo))))
    spec: Any = (ValidatorSpec(validator.settings, validator.backend, validator.options, validator.environment)
                 if ex.portable else validator)

    def done(k: int, report: Report) -> None:
        artifact = items[todo[k]][0]
        report.environment = validator.environment  # this process's, which the next reuse compares with
        if write:
            write_report(artifact, report)
        results[todo[k]] = report.to_dict()
        if on_done:
            on_done(artifact, results[todo[k]], False)

    try:
        run_units(ex, validate_unit, [(spec, ex.artifact_ref(items[i][0].path, skip=(ATTEMPTS,)),
                                       ex.source_ref(items[i][1])) for i in todo], done)
    finally:
        if executor is None:
            ex.close()
    return [results[i] for i in range(len(items))]


@dataclass
class ValidatorSpec:
    """What a node needs to build the driver's Validator (one per worker process, kept for its cache)."""

    settings: Any
    backend: str
    options: SandboxOptions
    #: the driver's `environment_key`: what the reports record, so the driver's next run can reuse them
    environment: str = ""


_validators: dict[str, Any] = {}


def cached_validator(spec: Any) -> "Validator":
    """The Validator of `spec` on this machine: the driver's own, or one built once per worker process (its
    original-run cache is kept across the units of a run)."""
    if isinstance(spec, Validator):
        return spec
    key = repr(spec)
    if key not in _validators:
        # one sandbox slot per unit: the inverse-mutation runs of an artifact share it
        _validators[key] = Validator(replace(spec.settings, jobs=1), backend=spec.backend, options=spec.options)
    return _validators[key]


def validate_unit(spec: Any, ref: ArtifactRef, sref: SourceRef):
    """The Report of one artifact (not written)."""
    validator = cached_validator(spec)
    with scratch_for(ref) as scratch:
        path = ref.materialize(scratch) if scratch is not None else Path(ref.origin)
        source = sref.materialize()
        report = validator.validate(Artifact(path), source)
    report.source = sref.source.to_dict()
    return relabel(report, path_mapping(path, ref, source, sref))
