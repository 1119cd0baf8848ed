"""One reader of `[validate] test_patterns` for solving (#27 step 5.5): what grading treats as tests is what the
repair baseline treats as tests. Before, repair searched with the default patterns whatever the config said, so a
repository whose tests live elsewhere (`spec/`) had its tests mutated as if they were code."""

from __future__ import annotations

from ssrkit.solve import repair
from ssrkit.solve.grade import GradeSettings
from ssrkit.solve.solvers import RepairSolver, SolveContext, Solver, SolverOutput
from ssrkit.store.config import Config
from ssrkit.verdict.patterns import DEFAULT_TEST_PATTERNS

from fixtures.solving import make_engine

SPEC = ["spec/*", "*_spec.py"]


class Recording(Solver):
    name = "recording"

    def __init__(self):
        self.seen: list[list[str]] = []

    def solve(self, ctx):
        self.seen.append(list(ctx.test_patterns))
        return SolverOutput(fix_diff="")


def test_the_grading_patterns_reach_the_solver(calc_artifact):
    solver = Recording()
    make_engine(test_patterns=SPEC).solve([(calc_artifact, calc_artifact.metadata.repo)], solver, attempts=1)
    assert solver.seen == [SPEC]


def test_grade_settings_read_the_patterns_through_the_validate_settings():
    cfg = Config({"validate": {"test_patterns": SPEC, "timeout": 30}})
    grade = GradeSettings.from_config(cfg)
    assert grade.test_patterns == SPEC and grade.timeout == 30.0
    assert GradeSettings.from_config(Config({})).test_patterns == list(DEFAULT_TEST_PATTERNS)


def test_the_repair_solver_searches_with_the_context_patterns(monkeypatch, tmp_path, calc_artifact):
    seen = {}

    def find_repair(sandbox, **kw):
        seen.update(kw)
        raise LookupError("stop here")

    monkeypatch.setattr(repair, "find_repair", find_repair)
    ctx = SolveContext(artifact=calc_artifact, sandbox=None, attempt="001", out_dir=tmp_path, seed=0, test_diff="",
                       timeout=5.0, test_patterns=SPEC)
    try:
        RepairSolver(budget_runs=3).solve(ctx)
    except LookupError:
        pass
    assert seen["test_patterns"] == SPEC and seen["budget_runs"] == 3
