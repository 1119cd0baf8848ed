"""What grading costs per attempt (issue 15): the graded state is made once, and a passing attempt pays one
extra test run (the canary), a failing one none."""

from __future__ import annotations

import pytest

from fixtures import calc_pkg
from fixtures.solving import attempt, sub
from ssrkit.solve import grade as grading
from ssrkit.solve.solvers import make_solver


@pytest.fixture
def counted(monkeypatch):
    calls = {"prepare": 0, "execute": 0, "parse_sandboxes": set()}
    real_prepare, real_execute = grading.prepare, grading.execute

    def prepare(*a, **kw):
        calls["prepare"] += 1
        return real_prepare(*a, **kw)

    def execute(work, clean, *a, **kw):
        calls["execute"] += 1
        calls["parse_sandboxes"].add(id(clean))
        return real_execute(work, clean, *a, **kw)

    monkeypatch.setattr(grading, "prepare", prepare)
    monkeypatch.setattr(grading, "execute", execute)
    return calls


def test_a_passing_attempt_costs_one_extra_run(engine, calc_artifact, counted):
    art = calc_artifact
    [rec] = engine.solve([(art, art.metadata.repo)], make_solver("oracle"), attempts=1, redo=True)
    assert rec["passed"], rec["reason"]
    assert rec["canary"]["status"] == "caught"
    assert counted["prepare"] == 1  # the canary resets to the graded snapshot instead of preparing again
    assert counted["execute"] == 2  # the graded run and the canary run
    assert len(counted["parse_sandboxes"]) == 1


def test_a_failing_attempt_costs_no_extra_run(engine, calc_artifact, counted):
    rec, _ = attempt(engine, calc_artifact, {"src/calc/ops.py": sub("return x\n    return x", "return hi\n    return x")})
    assert not rec["passed"]
    assert rec["canary"] is None
    assert counted["prepare"] == 1 and counted["execute"] == 1


def test_the_canary_run_starts_from_the_graded_state(engine, calc_artifact, counted):
    """A correct fix whose code leaves a file behind on its first import and breaks when it finds one: the
    canary run starts from the graded snapshot (the file gone), so the attempt passes with the canary
    caught."""
    leave = ("import pathlib as _p\n"
             "_m = _p.Path(__file__).resolve().parents[2] / 'ssrkit-leftover'\n"
             "if _m.exists():\n"
             "    raise RuntimeError('this run saw what the previous one left')\n"
             "_m.write_text('x')\n")
    rec, _ = attempt(engine, calc_artifact, {"src/calc/ops.py": lambda text: calc_pkg.OPS + "\n" + leave})
    assert rec["passed"], rec["reason"]
    assert rec["canary"]["status"] == "caught"
    assert counted["prepare"] == 1 and counted["execute"] == 2
