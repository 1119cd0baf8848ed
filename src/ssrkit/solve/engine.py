"""The solving engine (SPEC §6): N independent attempts per artifact, each solved in one sandbox and graded in
a fresh one, locally or as units of an executor. Attempts live in `attempts/NNN/`, whose layout
`store.attempts` owns; attempts of different solvers can be mixed in one group."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import patch as patches
from ..store.artifact import FIX, LOGS, OUTPUT_DIRS, TRAJECTORY, Artifact
from ..store.attempts import (as_received, attempt_dir, attempt_files, begin_attempt, claim_new_attempt, eval_record,
                              has_fix, has_trajectory, plan_attempts, read_eval, read_fix, receive_attempt,
                              write_fix, write_graded)
from ..errors import SsrkitError
from ..executor import ArtifactRef, Scratch, SourceRef, relabel
from .grade import GradeSettings, grade, load_expectations
from ..store.config import Config
from ..sandbox import Sandbox, SandboxOptions, backend_from_config, open_sandbox
from .solvers import SolveContext, Solver
from ..store.source import RepoSource
from ..executor.units import path_mapping, relabel_bytes
from ..verdict.judge import Expectations
from .sandbox import prepare_solver_sandbox, solver_diff, task_diff

if TYPE_CHECKING:
    from ..executor import Executor


EXTERNAL = "external"


@dataclass
class SolveOptions:
    grade: GradeSettings = field(default_factory=GradeSettings)
    backend: str = "auto"
    sandbox: SandboxOptions = field(default_factory=SandboxOptions)
    jobs: int = 1
    seed: int = 0
    #: more host paths the solver must not see (`[solve] hide`, e.g. the run directory); the artifacts being
    #: solved and the parent of a higher-order artifact are always hidden
    hide: list[str] = field(default_factory=list)
    attempts: int = 8  # finished attempts each artifact must have (`[solve] attempts`, `--attempts`)

    @classmethod
    def from_config(cls, cfg: Config, *, backend: str | None = None, jobs: int | None = None,
                    timeout: float | None = None, seed: int | None = None,
                    attempts: int | None = None) -> "SolveOptions":
        """`[solve]` (jobs, hide, attempts), `[sandbox]` and the grading settings; flags (not None) win."""
        d = cls()
        return cls(
            grade=GradeSettings.from_config(cfg, timeout=timeout),
            backend=backend_from_config(cfg, backend),
            sandbox=SandboxOptions.from_config(cfg),
            jobs=jobs or int(cfg.get("solve", "jobs", d.jobs)),
            seed=seed if seed is not None else d.seed,
            hide=[str(p) for p in cfg.get("solve", "hide", d.hide)],
            attempts=attempts if attempts is not None else int(cfg.get("solve", "attempts", d.attempts)),
        )


class Engine:
    """Runs attempts and grades fixes; opens one sandbox to solve and a fresh one to grade."""

    def __init__(self, options: SolveOptions | None = None):
        self.options = options or SolveOptions()

    def open(self, source: RepoSource, *, hide: list[str] | None = None) -> Sandbox:
        options = self.options.sandbox
        if hide:
            options = dataclasses.replace(options, hide=[*options.hide, *hide])
        return open_sandbox(source, self.options.backend, options)

    def hidden_paths(self, artifacts: list[Artifact]) -> list[str]:
        """What a solver sandbox hides: these artifacts, their higher-order parents, `[solve] hide`."""
        out: list[str] = []
        for a in artifacts:
            out.append(str(a.path.resolve()))
            parent = a.metadata.extra.get("parent_path") if a.has_metadata else None
            if parent:
                out.append(str(parent))
        out.extend(str(Path(p).expanduser().resolve()) for p in self.options.hide)
        return sorted(set(out))

    # grading -----------------------------------------------------------------------------------
    def grade_fix(self, artifact: Artifact, source: RepoSource, fix_diff: str,
                  expect: Expectations | None = None):
        expect = expect or load_expectations(artifact)
        hide = self.hidden_paths([artifact])  # the fix's code must not read the answer in the artifact
        with self.open(source, hide=hide) as work, self.open(source, hide=hide) as clean:
            return grade(work, artifact, fix_diff, clean=clean, settings=self.options.grade, expect=expect)

    def _write_graded(self, artifact: Artifact, name: str, fix_diff: str, *, solver: str,
                      solver_info: dict[str, Any], expect: Expectations, source: RepoSource) -> dict[str, Any]:
        result = self.grade_fix(artifact, source, fix_diff, expect)
        record = eval_record(result.to_dict(), solver=solver, attempt=name, artifact=artifact,
                             solver_info=solver_info)
        return write_graded(artifact, name, result.log, result.canary_log, record)

    # one attempt -------------------------------------------------------------------------------
    def run_attempt(self, artifact: Artifact, source: RepoSource, solver: Solver, name: str,
                    expect: Expectations, hide: list[str] | None = None) -> dict[str, Any]:
        d = begin_attempt(artifact, name)
        started = time.monotonic()
        hide = hide if hide is not None else self.hidden_paths([artifact])
        with self.open(source, hide=hide) as sb:
            prepare_solver_sandbox(sb, artifact)
            ctx = SolveContext(artifact=artifact, sandbox=sb, attempt=name, out_dir=d,
                               seed=self.options.seed + int(name), test_diff=task_diff(artifact),
                               timeout=self.options.grade.timeout,
                               test_patterns=list(self.options.grade.test_patterns))
            out = solver.solve(ctx)
            fix = out.fix_diff if out.fix_diff is not None else solver_diff(sb)
        if out.trajectory is not None:  # the agent's record says how large the fix it is graded by is
            out.trajectory.set_submission({**(out.trajectory.data["submission"] or {}),
                                           "fix_diff_bytes": len(fix.encode())})
        info = {**solver.describe(), **out.info, "seconds": round(time.monotonic() - started, 3)}
        if has_trajectory(artifact, name):
            info["trajectory"] = TRAJECTORY
        write_fix(artifact, name, fix)
        return self._write_graded(artifact, name, fix, solver=solver.name, solver_info=info, expect=expect,
                                  source=source)

    def regrade_attempt(self, artifact: Artifact, source: RepoSource, name: str,
                        expect: Expectations) -> dict[str, Any]:
        # past the diff limit the rest is never read: the verdict is "too large"
        fix = read_fix(artifact, name, limit=patches.MAX_DIFF_BYTES + 1)
        if fix is None:
            raise SsrkitError(f"{attempt_dir(artifact, name)}: no {FIX} to re-grade; run `ssrkit solve` to redo "
                              f"this attempt")
        old = read_eval(artifact, name) or {}
        info = dict(old.get("solver_info") or {})
        info["regraded"] = True
        return self._write_graded(artifact, name, fix, solver=old.get("solver", "unknown"), solver_info=info,
                                  expect=expect, source=source)

    def add_external(self, artifact: Artifact, source: RepoSource, fix_diff: str, *, origin: str = "",
                     expect: Expectations | None = None) -> dict[str, Any]:
        """Grade a patch produced by any other tool and keep it as a new attempt (solver "external")."""
        expect = expect or load_expectations(artifact)
        name = claim_new_attempt(artifact)
        write_fix(artifact, name, fix_diff)
        info = {"name": EXTERNAL, **({"origin": origin} if origin else {})}
        return self._write_graded(artifact, name, fix_diff, solver=EXTERNAL, solver_info=info, expect=expect,
                                  source=source)

    # many ---------------------------------------------------------------------------------------
    def _map(self, items: list[tuple[Artifact, RepoSource]], jobs: list[tuple[int, Solver | None, str, Expectations]],
             hide: list[str] | None, on_done: Callable[[dict[str, Any]], None] | None,
             executor: "Executor | None") -> list[dict[str, Any]]:
        """Run (item index, solver — None to re-grade —, attempt, expectations) as units of `executor`
        (default: the local pool of `jobs`); attempts made elsewhere are written here, eval.json last."""
        from ..executor import LocalExecutor, run_units

        ex = executor or LocalExecutor(min(self.options.jobs, max(1, len(jobs))))
        spec: Any = self.options if ex.portable else self
        skip = (LOGS,) if any(s is None for _, s, _, _ in jobs) else OUTPUT_DIRS  # a regrade ships the fixes
        refs = {i: (ex.artifact_ref(items[i][0].path, skip=skip), ex.source_ref(items[i][1]))
                for i in sorted({i for i, _, _, _ in jobs})}

        def done(k: int, out: tuple[dict[str, Any], dict[str, bytes] | None]) -> None:
            record, files = out
            if files is not None:
                i, _, name, _ = jobs[k]
                receive_attempt(items[i][0], name, files)
            if on_done:
                on_done(record)

        try:
            outs = run_units(ex, attempt_unit, [(spec, *refs[i], solver, name, expect, hide)
                                                for i, solver, name, expect in jobs], done)
        finally:
            if executor is None:
                ex.close()
        return [record for record, _ in outs]

    def solve(self, items: list[tuple[Artifact, RepoSource]], solver: Solver, *, attempts: int | None = None,
              redo: bool = False, on_done: Callable[[dict[str, Any]], None] | None = None,
              executor: "Executor | None" = None) -> list[dict[str, Any]]:
        """Make sure every artifact has `attempts` (default: the options') finished attempts; return the eval.json
        of each one run."""
        attempts = self.options.attempts if attempts is None else attempts
        jobs: list[tuple[int, Solver | None, str, Expectations]] = []
        hide = self.hidden_paths([a for a, _ in items])
        for i, (artifact, source) in enumerate(items):
            expect = load_expectations(artifact)
            for name in plan_attempts(artifact, attempts, redo=redo):
                jobs.append((i, solver, name, expect))
        return self._map(items, jobs, hide, on_done, executor)

    def regrade(self, items: list[tuple[Artifact, RepoSource]], *,
                on_done: Callable[[dict[str, Any]], None] | None = None,
                executor: "Executor | None" = None) -> list[dict[str, Any]]:
        """Re-grade every saved fix.diff without running any solver."""
        jobs: list[tuple[int, Solver | None, str, Expectations]] = []
        for i, (artifact, source) in enumerate(items):
            expect = load_expectations(artifact)
            for d in artifact.attempt_dirs():
                if has_fix(artifact, d.name):
                    jobs.append((i, None, d.name, expect))
        return self._map(items, jobs, None, on_done, executor)


def solvable(items: list[tuple[Artifact, RepoSource]], *,
             strict: bool = True) -> tuple[list[tuple[Artifact, RepoSource]], list[str]]:
    """The artifacts that may be solved, and a note for each invalid one left out.

    Only valid artifacts whose validation.json is up to date are solved; an unvalidated or stale one is an
    error (validate it first). When every artifact is invalid: an error if `strict` (one artifact named on
    the command line, or a patch to grade), else nothing (a pipeline's directory of all-invalid artifacts is
    nothing to do)."""
    keep, notes = [], []
    for art, source in items:
        data = art.validation
        if data is not None and data.get("valid") is False and data.get("content_id") == art.content_id():
            notes.append(f"skipped {art.path}: invalid (validate it first after fixing it)")
            continue
        load_expectations(art)  # raises the "validate it first" errors
        keep.append((art, source))
    if not keep and strict:
        if len(items) == 1:
            load_expectations(items[0][0])
        raise SsrkitError("no valid artifact to solve; validate them first (ssrkit validate …)")
    return keep, notes


def attempt_unit(spec: Any, ref: ArtifactRef, sref: SourceRef, solver: Any, name: str, expect: Any,
                 hide: list[str] | None) -> tuple[dict[str, Any], dict[str, bytes] | None]:
    """Run attempt `name` (or re-grade it when `solver` is None): (its eval.json, its files when they
    must be written by the driver — None when it was made in place)."""
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
        files = attempt_files(art, name)
    mapping = path_mapping(path, ref, source, sref)
    record = relabel(record, mapping)
    files = as_received(record, relabel_bytes(files, mapping))
    return record, files
