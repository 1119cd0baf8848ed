"""The Validator: runs every check on one artifact with what is shared across artifacts (the original-run
cache, run slots, sandbox settings), and `validation.json`'s shape (`Report`) with its writer and reuse rule."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Iterator

from .. import __version__
from ..store.artifact import VALIDATION, Artifact, log_path, now_iso, parser_stderr_path
from ..errors import SsrkitError
from ..sandbox import SandboxOptions, environment_key, open_sandbox
from ..store.source import RepoSource
from ..testrun import TestRun
from .runslots import RunSlots
from .cache import OriginalRunCache
from .checks import CHECK_NAMES, FAIL, PASS, WARN, Check, _Context, _run_checks
from .settings import Settings


@dataclass
class Report:
    """What `validation.json` holds (one element of `ssrkit validate --json`)."""

    artifact: str
    valid: bool
    checks: list[Check]
    #: the tests the bug breaks and those it leaves passing, as bug_breaks measured them (also when a later
    #: check fails; empty when bug_breaks did not run): only a valid artifact's are a task's
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runs: dict[str, Any] = field(default_factory=dict)
    #: the original run (and the parser's verdict on it) came from the original-run cache: no command ran for it
    original_cached: bool = False
    source: dict[str, Any] = field(default_factory=dict)
    #: the thresholds used, and `isolation`: what the sandbox isolated while the artifact's code ran
    settings: dict[str, Any] = field(default_factory=dict)
    content_id: str = ""
    settings_key: str = ""
    #: `sandbox.environment_key` of the validating process: a verdict is reused only under the same one
    environment: str = ""
    seconds: float = 0.0
    #: {"seconds": the artifact's budget of test runs (`Settings.wall_budget`), "used": what its runs took}
    budget: dict[str, float] = field(default_factory=dict)
    created: str = ""
    ssrkit_version: str = __version__
    #: raw logs of the runs, written to logs/ rather than into validation.json
    logs: dict[str, str] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("logs")
        d["checks"] = [asdict(c) | {"seconds": round(c.seconds, 3)} for c in self.checks]
        d["seconds"] = round(self.seconds, 3)
        return d

    @property
    def first_failure(self) -> Check | None:
        return next((c for c in self.checks if c.status == FAIL), None)


#: runs a caller may hand to `Validator.validate(..., known=)`: the artifact's bug on the original code
KNOWN_RUNS = ("bug",)


class Validator:
    """Validates artifacts; holds what is shared across them (cache, run slots, sandbox settings)."""

    def __init__(self, settings: Settings, *, backend: str = "auto", options: SandboxOptions | None = None):
        self.settings = settings
        self.backend = backend
        self.options = options or SandboxOptions()
        self.cache = OriginalRunCache(settings.cache)
        self.slots = RunSlots(settings.jobs)
        self._fingerprints: dict[RepoSource, str] = {}
        self._fp_lock = threading.Lock()
        #: what the sandboxes' commands run with (part of the original-run cache's key)
        self.environment = environment_key(self.options)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """At most `jobs` test runs at once, whatever mix of artifacts and inverse runs asks."""
        with self.slots.run():
            yield

    def open(self, source: RepoSource):
        return open_sandbox(source, self.backend, self.options)

    def fingerprint(self, source: RepoSource) -> str:
        from ..sandbox.factory import fingerprint

        with self._fp_lock:
            if source not in self._fingerprints:
                self._fingerprints[source] = fingerprint(source)
            return self._fingerprints[source]

    def validate(self, artifact: Artifact, source: RepoSource, *, known: dict[str, TestRun] | None = None) -> Report:
        """Run every check on one artifact; nothing is written (see `write_report`).

        `known` maps a run's name (`KNOWN_RUNS`) to a run of exactly that state (original code + the named
        diffs, this artifact's test script and parser) that the caller made earlier, to use instead of
        running it again: the injector, which has just run an artifact's tests with its bug applied, hands
        over `{"bug": run}`."""
        unknown = sorted(set(known or {}) - set(KNOWN_RUNS))
        if unknown:
            raise ValueError(f"known runs {unknown} are not among {KNOWN_RUNS}")
        started = time.monotonic()
        ctx = _Context(artifact, source, self.settings, self, known)
        with self.slots.artifact():
            try:
                _run_checks(ctx)
            finally:
                ctx.close()
        checks = [ctx.results[n] for n in CHECK_NAMES]
        valid = all(c.status in (PASS, WARN) for c in checks)
        return Report(
            artifact=str(artifact.path),
            valid=valid,
            checks=checks,
            fail_to_pass=ctx.fail_to_pass,  # what bug_breaks measured, whatever a later check says
            pass_to_pass=ctx.pass_to_pass,
            warnings=ctx.warnings,
            notes=ctx.notes,
            original_cached=ctx.original_cached,
            runs={name: _run_entry(name, run) for name, run in ctx.runs.items()},
            source=source.to_dict(),
            settings={**{k: v for k, v in asdict(self.settings).items() if k not in ("jobs", "cache")},
                      "isolation": ctx.isolation},
            content_id=artifact.content_id(),
            settings_key=self.settings.key(),
            environment=self.environment,
            seconds=time.monotonic() - started,
            budget={"seconds": self.settings.wall_budget, "used": round(ctx.used, 3)},
            created=now_iso(),
            logs=_logs(ctx.runs),
        )


def _logs(runs: dict[str, TestRun]) -> dict[str, str]:
    """The raw logs of the runs, and the parser's stderr of those whose parse failed."""
    out = {log_path(name): run.log for name, run in runs.items()}
    out.update({parser_stderr_path(name): run.parser_stderr for name, run in runs.items() if run.parser_stderr})
    return out


def _run_entry(name: str, run: TestRun) -> dict[str, Any]:
    return run.summary() | {"log": log_path(name)}


def write_report(artifact: Artifact, report: Report) -> None:
    """Write the raw logs, then validation.json (last, so its presence means the logs are there)."""
    for relpath, log in report.logs.items():
        artifact.write_text(relpath, log)
    artifact.write_json(VALIDATION, report.to_dict())


def previous_report(artifact: Artifact, settings: Settings, source: RepoSource,
                    environment: str) -> dict[str, Any] | None:
    """A saved validation.json still valid for these files, settings, source and environment (so batch runs
    skip it): a verdict made with a virtualenv active, or before a `pip install`, is no answer without it."""
    try:
        data = artifact.validation
    except SsrkitError:
        return None
    if not data:
        return None
    if (data.get("content_id") != artifact.content_id() or data.get("settings_key") != settings.key()
            or data.get("source") != source.to_dict() or data.get("environment") != environment):
        return None
    return data
