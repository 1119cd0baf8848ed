"""Solving (SPEC §6): N independent attempts per artifact, each graded in a fresh sandbox.

The solver's sandbox holds the original code with `bug_inject.diff` and `test_weaken.diff` applied; its git
history is removed and replaced by one fresh commit, so neither the past nor the bug is visible. A
higher-order artifact needs nothing extra: its `bug_inject.diff` *is* the combined code diff of its parent's
bug and the failed fix stacked on it (see `higher_order.py`), so the same recipe yields the stacked state.

The fix is the sandbox's diff against that fresh commit (new and deleted files included), computed through a
private git directory in the sandbox's scratch space: whatever the solver does to the repository's own `.git`
(commits, resets, a new `git init`) neither hides nor adds changes.

Attempts live in `attempts/NNN/`: `fix.diff`, `trajectory.json` (LLM solvers), `test_output.log` and
`eval.json`, written last — an attempt directory without `eval.json` is unfinished and is redone. Making sure
an artifact has N attempts is idempotent; a larger N adds only the missing ones, so attempts of different
solvers can be mixed in one group.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import dataclasses
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from . import patch as patches
from .artifact import ATTEMPTS, BUG_DIFF, REWARD, TRAJECTORY, WEAKEN_DIFF, Artifact
from .errors import PatchError, SsrkitError
from .fsutil import read_json
from .grade import Expectations, GradeSettings, current_validation, eval_record, grade, load_expectations
from .sandbox import PRISTINE, Sandbox, SandboxOptions, open_sandbox
from .source import RepoSource

if TYPE_CHECKING:
    from .executor import Executor

FIX = "fix.diff"
EVAL = "eval.json"
TEST_OUTPUT = "test_output.log"
EXTERNAL = "external"

#: Generated junk that never belongs in a fix (kept out of the solver's fresh repository and of the diff).
JUNK = ["__pycache__/", "*.py[cod]", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", ".hypothesis/",
        ".coverage", ".coverage.*", "*.egg-info/"]
_BASE_GIT = "ssrkit-base.git"
_GIT_ID = "-c user.name=ssrkit -c user.email=ssrkit@localhost -c commit.gpgsign=false"


# -- the solver's sandbox -------------------------------------------------------------------------

def prepare_solver_sandbox(sandbox: Sandbox, artifact: Artifact, *, timeout: float = 120) -> None:
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
        f"cp .git/info/exclude {q}/info/exclude && git add -A . && git {_GIT_ID} commit -q --no-verify -m base",
        timeout=timeout,
    )
    if not res.ok:
        raise SsrkitError(f"could not record the solver's starting state: {res.output.strip()[:300]}")


def solver_diff(sandbox: Sandbox, *, timeout: float = 120) -> str:
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


# -- solvers --------------------------------------------------------------------------------------

@dataclass
class SolveContext:
    artifact: Artifact
    sandbox: Sandbox
    attempt: str
    out_dir: Path
    seed: int
    test_diff: str
    timeout: float  # the test budget per run (for solvers that run tests)


@dataclass
class SolverOutput:
    #: the fix; None means "whatever the solver left in the sandbox" (the usual case)
    fix_diff: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Solver(ABC):
    """A way to produce a fix in the solver's sandbox. Implementations must be safe to call from threads."""

    name = "?"

    @abstractmethod
    def solve(self, ctx: SolveContext) -> SolverOutput:
        """Work in `ctx.sandbox`; return the fix (or None: the sandbox's diff is the fix)."""

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


class OracleSolver(Solver):
    """The reverse of `bug_inject.diff`: must always succeed (a check of the grading itself)."""

    name = "oracle"

    def solve(self, ctx: SolveContext) -> SolverOutput:
        ctx.sandbox.apply_patch(patches.reverse(ctx.artifact.bug_diff), label=f"reversed {BUG_DIFF}")
        return SolverOutput()


class NullSolver(Solver):
    """The empty patch: must always fail."""

    name = "null"

    def solve(self, ctx: SolveContext) -> SolverOutput:
        return SolverOutput(fix_diff="")


class LLMSolver(Solver):
    """The agent loop with the solver prompt against an OpenAI-compatible endpoint (`ssrkit.agents`).

    The task is the fixed template around the reversed `test_weaken.diff`; the trajectory is saved in the
    attempt directory after every step. The fix is whatever the agent left in the sandbox, whatever its exit
    status: grading decides. Model errors (endpoint down, unknown model) abort the run instead of being
    recorded as failed attempts, so they never turn into rewards.
    """

    name = "llm"

    def __init__(self, client: Any, config: Any = None):
        self.client = client
        self.config = config

    @classmethod
    def from_options(cls, *, client: Any = None, agent: dict[str, Any] | None = None, **_: Any) -> "LLMSolver":
        """`client`: the `ModelClient` (built from flags and config by the CLI's `model_client`)."""
        from .agents import AgentConfig

        if client is None:
            raise SsrkitError("the llm solver needs a model: --base-url and --model (e.g. --base-url "
                              "http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-7B-Instruct)")
        return cls(client, AgentConfig.from_dict(agent))

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, **self.client.describe()}

    def solve(self, ctx: SolveContext) -> SolverOutput:
        from .agents import run_llm_solver, solver_task

        task = solver_task(ctx.test_diff)
        traj, _ = run_llm_solver(ctx.sandbox, self.client, task, ctx.out_dir, config=self.config,
                                 info={"artifact": ctx.artifact.id, "attempt": ctx.attempt})
        info: dict[str, Any] = {"exit_status": traj.exit_status, "turns": len(traj.turns)}
        if traj.error:
            info["error"] = traj.error
        return SolverOutput(info=info)


class RepairSolver(Solver):
    """Search-based program repair with no model (`ssrkit.repair.find_repair`): fault localization from the
    failing tests' coverage, inverse mutations at the most suspicious lines, the first patch with which every
    test passes. Bugs it fixes are trivially easy — a useful filter for a task pool."""

    name = "repair"

    def __init__(self, budget_runs: int = 40, partial: bool = False):
        if budget_runs < 1:
            raise SsrkitError("the repair budget must be at least 1 test run")
        self.budget_runs = budget_runs
        self.partial = partial  # without a fix, submit the best partial one (a failed attempt that changed code)

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "budget_runs": self.budget_runs, **({"partial": True} if self.partial else {})}

    def solve(self, ctx: SolveContext) -> SolverOutput:
        from .repair import find_repair

        art = ctx.artifact
        r = find_repair(ctx.sandbox, tests_diff=ctx.test_diff, test_script=art.test_script,
                        test_parser=art.test_parser, timeout=ctx.timeout, budget_runs=self.budget_runs,
                        seed=ctx.seed)
        info: dict[str, Any] = {"found": r.fix_diff is not None, "runs": r.runs, "candidates": r.candidates,
                                "note": r.note, "search_seconds": round(r.seconds, 3)}
        fix = r.fix_diff or ""
        if r.fix_diff is None and self.partial and r.partial:
            fix = r.partial
            info["submitted_partial"] = r.partial_note
        return SolverOutput(fix_diff=fix, info=info)


#: name → factory(**options); only solvers whose code exists on this branch are registered.
SOLVERS: dict[str, Callable[..., Solver]] = {
    "oracle": lambda **_: OracleSolver(),
    "null": lambda **_: NullSolver(),
    "llm": LLMSolver.from_options,
    "repair": lambda budget_runs=None, partial=False, **_: RepairSolver(budget_runs or 40, partial=bool(partial)),
}


def register_solver(name: str, factory: Callable[..., Solver]) -> None:
    SOLVERS[name] = factory


def make_solver(name: str, **options: Any) -> Solver:
    factory = SOLVERS.get(name)
    if factory is None:
        raise SsrkitError(f"unknown solver {name!r}; available: {', '.join(sorted(SOLVERS))}")
    return factory(**options)


# -- attempts on disk -----------------------------------------------------------------------------

def attempt_name(i: int) -> str:
    return f"{i:03d}"


def attempt_dir(artifact: Artifact, name: str) -> Path:
    return artifact.path / ATTEMPTS / name


def is_complete(d: Path) -> bool:
    return (d / EVAL).is_file()


def completed_attempts(artifact: Artifact) -> list[Path]:
    return [d for d in artifact.attempt_dirs() if is_complete(d)]


def plan_attempts(artifact: Artifact, n: int, *, redo: bool = False) -> list[str]:
    """The attempt names to (re)run so the artifact has `n` finished attempts.

    Finished attempts are kept; unfinished ones (no eval.json) are reused first, then new numbers follow
    the highest existing one. With `redo`, attempts 001..n are all run again.
    """
    if n < 0:
        raise SsrkitError("--attempts must be at least 0")
    if redo:
        return [attempt_name(i) for i in range(1, n + 1)]
    dirs = artifact.attempt_dirs()
    done = [d for d in dirs if is_complete(d)]
    need = n - len(done)
    if need <= 0:
        return []
    todo = [d.name for d in dirs if not is_complete(d)][:need]
    nxt = max((int(d.name) for d in dirs), default=0) + 1
    while len(todo) < need:
        todo.append(attempt_name(nxt))
        nxt += 1
    return todo


_claim_lock = threading.Lock()


def claim_new_attempt(artifact: Artifact) -> str:
    """A fresh attempt number after every existing one, created on disk at once (safe across threads)."""
    with _claim_lock:
        dirs = artifact.attempt_dirs()
        nxt = max((int(d.name) for d in dirs), default=0) + 1
        while True:
            d = attempt_dir(artifact, attempt_name(nxt))
            try:
                artifact.make_dir(f"{ATTEMPTS}/{d.name}", exist_ok=False)
                return d.name
            except FileExistsError:
                nxt += 1


def read_eval(artifact: Artifact, name: str) -> dict[str, Any] | None:
    p = attempt_dir(artifact, name) / EVAL
    if not p.is_file():
        return None
    try:
        return read_json(p)
    except (ValueError, UnicodeDecodeError) as e:
        raise SsrkitError(f"{p}: not valid JSON ({e}); delete the attempt directory to redo it")


# -- the engine -----------------------------------------------------------------------------------

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
        artifact.write_text(f"{ATTEMPTS}/{name}/{TEST_OUTPUT}", result.log)
        record = eval_record(result, solver=solver, attempt=name, artifact=artifact, solver_info=solver_info)
        artifact.write_json(f"{ATTEMPTS}/{name}/{EVAL}", record)
        return record

    # one attempt -------------------------------------------------------------------------------
    def run_attempt(self, artifact: Artifact, source: RepoSource, solver: Solver, name: str,
                    expect: Expectations, hide: list[str] | None = None) -> dict[str, Any]:
        artifact.remove(f"{ATTEMPTS}/{name}")  # refuses a symlinked attempts/ or attempt directory
        d = artifact.make_dir(f"{ATTEMPTS}/{name}")
        started = time.monotonic()
        hide = hide if hide is not None else self.hidden_paths([artifact])
        with self.open(source, hide=hide) as sb:
            prepare_solver_sandbox(sb, artifact)
            ctx = SolveContext(artifact=artifact, sandbox=sb, attempt=name, out_dir=d,
                               seed=self.options.seed + int(name), test_diff=task_diff(artifact),
                               timeout=self.options.grade.timeout)
            out = solver.solve(ctx)
            fix = out.fix_diff if out.fix_diff is not None else solver_diff(sb)
        info = {**solver.describe(), **out.info, "seconds": round(time.monotonic() - started, 3)}
        if (d / TRAJECTORY).is_file():
            info["trajectory"] = TRAJECTORY
        artifact.write_text(f"{ATTEMPTS}/{name}/{FIX}", fix)
        return self._write_graded(artifact, name, fix, solver=solver.name, solver_info=info, expect=expect,
                                  source=source)

    def regrade_attempt(self, artifact: Artifact, source: RepoSource, name: str,
                        expect: Expectations) -> dict[str, Any]:
        d = attempt_dir(artifact, name)
        fix_path = d / FIX
        if not fix_path.is_file():
            raise SsrkitError(f"{d}: no {FIX} to re-grade; run `ssrkit solve` to redo this attempt")
        old = read_eval(artifact, name) or {}
        fix = fix_path.read_bytes().decode("utf-8", "replace")
        info = dict(old.get("solver_info") or {})
        info["regraded"] = True
        return self._write_graded(artifact, name, fix, solver=old.get("solver", "unknown"), solver_info=info,
                                  expect=expect, source=source)

    def add_external(self, artifact: Artifact, source: RepoSource, fix_diff: str, *, origin: str = "",
                     expect: Expectations | None = None) -> dict[str, Any]:
        """Grade a patch produced by any other tool and keep it as a new attempt (solver "external")."""
        expect = expect or load_expectations(artifact)
        name = claim_new_attempt(artifact)
        artifact.write_text(f"{ATTEMPTS}/{name}/{FIX}", fix_diff)
        info = {"name": EXTERNAL, **({"origin": origin} if origin else {})}
        return self._write_graded(artifact, name, fix_diff, solver=EXTERNAL, solver_info=info, expect=expect,
                                  source=source)

    # many ---------------------------------------------------------------------------------------
    def _map(self, items: list[tuple[Artifact, RepoSource]], jobs: list[tuple[int, Solver | None, str, Expectations]],
             hide: list[str] | None, on_done: Callable[[dict[str, Any]], None] | None,
             executor: "Executor | None") -> list[dict[str, Any]]:
        """Run (item index, solver — None to re-grade —, attempt, expectations) as units of `executor`
        (default: the local pool of `jobs`); attempts made elsewhere are written here, eval.json last."""
        from .executor import LocalExecutor, run_units
        from .units import attempt_unit

        ex = executor or LocalExecutor(min(self.options.jobs, max(1, len(jobs))))
        spec: Any = self.options if ex.portable else self
        skip = ("logs",) if any(s is None for _, s, _, _ in jobs) else ("logs", ATTEMPTS)
        refs = {i: (ex.artifact_ref(items[i][0].path, skip=skip), ex.source_ref(items[i][1]))
                for i in sorted({i for i, _, _, _ in jobs})}

        def done(k: int, out: tuple[dict[str, Any], dict[str, bytes] | None]) -> None:
            record, files = out
            if files is not None:
                from .executor import write_tree

                i, _, name, _ = jobs[k]
                artifact = items[i][0]
                artifact.remove(f"{ATTEMPTS}/{name}")  # refuses a symlinked attempts/ or attempt directory
                write_tree(artifact.make_dir(f"{ATTEMPTS}/{name}"), files, last=(EVAL,))
            if on_done:
                on_done(record)

        try:
            outs = run_units(ex, attempt_unit, [(spec, *refs[i], solver, name, expect, hide)
                                                for i, solver, name, expect in jobs], done)
        finally:
            if executor is None:
                ex.close()
        return [record for record, _ in outs]

    def solve(self, items: list[tuple[Artifact, RepoSource]], solver: Solver, *, attempts: int = 8,
              redo: bool = False, on_done: Callable[[dict[str, Any]], None] | None = None,
              executor: "Executor | None" = None) -> list[dict[str, Any]]:
        """Make sure every artifact has `attempts` finished attempts; return the eval.json of each one run."""
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
                if (d / FIX).is_file():
                    jobs.append((i, None, d.name, expect))
        return self._map(items, jobs, None, on_done, executor)


def attempt_records(artifact: Artifact) -> list[dict[str, Any]]:
    """The eval.json of every finished attempt, in attempt order."""
    out = []
    for d in completed_attempts(artifact):
        rec = read_eval(artifact, d.name)
        if rec is not None:
            out.append(rec)
    return out


# -- rewards (the I/O around the pure functions of reward.py) --------------------------------------

def artifact_reward(artifact: Artifact, alpha: float) -> dict[str, Any]:
    """The reward.json object from validation.json and the finished attempts (not written)."""
    from .reward import reward_record

    data = current_validation(artifact)
    valid = bool(data.get("valid"))
    records = attempt_records(artifact) if valid else []
    if valid and not records:
        raise SsrkitError(f"{artifact.path} is valid but has no finished attempt; solve it first: "
                          f"ssrkit solve {artifact.path}")
    try:
        record = reward_record(valid=valid, passed=[bool(r.get("passed")) for r in records], alpha=alpha,
                               attempts=[r.get("attempt", "?") for r in records] if valid else None)
    except ValueError as e:
        raise SsrkitError(str(e))
    return {"artifact": str(artifact.path), **record}


def write_reward(artifact: Artifact, alpha: float) -> dict[str, Any]:
    record = artifact_reward(artifact, alpha)
    artifact.write_json(REWARD, record)
    return record
