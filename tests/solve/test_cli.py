"""`ssrkit solve`, `ssrkit reward`, `ssrkit higher-order` as a user runs them."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fixtures import calc_pkg
from fixtures.calc_pkg import CLAMP_ONLY
from fixtures.solving import ScriptedSolver
from ssrkit.cli.main import app
from ssrkit.errors import SsrkitError


def cli(*args: str, code: int = 0):
    res = CliRunner().invoke(app, [str(a) for a in args])
    if isinstance(res.exception, SsrkitError):  # main() turns these into one line and exit code 2
        assert code == 2, str(res.exception)
        return str(res.exception)
    assert res.exit_code == code, (res.exit_code, res.output, res.exception)
    return res.output


def test_solve_regrade_patch_reward_higher_order(calc_artifact, engine, tmp_path):
    art = str(calc_artifact.path)
    # oracle, then null: --attempts makes sure N attempts exist (idempotent; larger N adds only the missing)
    [oracle] = json.loads(cli("solve", art, "--solver", "oracle", "--attempts", "1", "--json"))
    assert oracle["passed"] and oracle["attempt"] == "001"
    assert json.loads(cli("solve", art, "--solver", "null", "--attempts", "1", "--json")) == []
    nulls = json.loads(cli("solve", art, "--solver", "null", "--attempts", "3", "--jobs", "2", "--json"))
    assert [(r["attempt"], r["solver"], r["passed"]) for r in nulls] == [("002", "null", False), ("003", "null", False)]

    # --regrade: every saved fix.diff again, no solver run
    regraded = json.loads(cli("solve", art, "--regrade", "--json"))
    assert [(r["attempt"], r["solver"], r["passed"]) for r in regraded] == [
        ("001", "oracle", True), ("002", "null", False), ("003", "null", False)]
    assert all(r["solver_info"]["regraded"] for r in regraded)

    # --patch: any tool's diff becomes a new attempt of solver "external"; exit code = verdict
    good = tmp_path / "good.diff"
    good.write_text((calc_artifact.path / "attempts" / "001" / "fix.diff").read_text())
    [ext] = json.loads(cli("solve", art, "--patch", good, "--json"))
    assert ext["passed"] and ext["solver"] == "external" and ext["attempt"] == "004"
    bad = tmp_path / "bad.diff"
    bad.write_text("--- a/src/calc/ops.py\n+++ b/src/calc/ops.py\n@@ -1,1 +1,1 @@\n-nope\n+nothing\n")
    [rej] = json.loads(cli("solve", art, "--patch", bad, "--json", code=1))
    assert not rej["passed"] and rej["reason"].startswith("the fix does not apply")
    assert (calc_artifact.path / "attempts" / "005" / "fix.diff").read_text() == bad.read_text()

    # a partial fix from another solver, for higher-order below
    engine.solve([(calc_artifact, calc_artifact.metadata.repo)], ScriptedSolver({"src/calc/ops.py": CLAMP_ONLY}),
                  attempts=6)

    # reward: 2 of 6 solved → s = 1/3, r = 1 - 1.8/3 = 0.4
    [rew] = json.loads(cli("reward", art, "--json"))
    assert rew["n_attempts"] == 6 and rew["n_solved"] == 2
    assert rew["injector_reward"] == pytest.approx(0.4)
    assert rew["solver_rewards"] == [1.0, -1.0, -1.0, 1.0, -1.0, -1.0]
    assert json.loads((calc_artifact.path / "reward.json").read_text())["solve_rate"] == pytest.approx(1 / 3)
    table = cli("reward", art, "--alpha", "0.5", "--no-write")
    assert "+0.500" in table and "2/6" in table  # 1 - 1.5/3
    cli("reward", art, "--alpha", "3", code=2)

    # higher-order: only the partial fix makes an artifact (the others passed, are empty or do not apply)
    out = tmp_path / "higher"
    results = json.loads(cli("higher-order", art, "--out", out, "--json"))
    by = {r["attempt"]: r for r in results}
    assert [a for a, r in by.items() if r["status"] == "created"] == ["006"]
    assert by["006"]["valid"] is True
    assert by["005"]["status"] == "skipped" and "does not apply" in by["005"]["reason"]
    assert by["002"]["status"] == "skipped"
    table = cli("higher-order", art, "--out", out)
    assert "duplicate" in table


def test_solve_refuses_what_is_not_validated(calc_pkg_repo, calc_artifact, tmp_path):
    fresh = calc_pkg.make_artifact(tmp_path / "fresh", calc_pkg_repo)
    msg = cli("solve", fresh.path, "--solver", "oracle", code=2)
    assert "validate it first" in msg
    assert "unknown solver 'nope'" in cli("solve", calc_artifact.path, "--solver", "nope", code=2)
    assert "--base-url and --model" in cli("solve", calc_artifact.path, "--solver", "llm", code=2)
    (calc_artifact.path / "bug_inject.diff").write_text(calc_artifact.bug_diff + "\n")
    assert "validate it first" in cli("solve", calc_artifact.path, "--solver", "null", code=2)
    assert "validate it first" in cli("reward", fresh.path, code=2)
    assert "not both" in cli("solve", fresh.path, "--regrade", "--patch", "x.diff", code=2)


def test_the_table_says_why_a_solver_submitted_nothing(calc_artifact, tmp_path):
    from ssrkit.cli.solve import reason

    out = cli("solve", calc_artifact.path, "--solver", "null", "--attempts", "1")
    assert "no fix submitted" in " ".join(out.split())
    ho = " ".join(cli("higher-order", calc_artifact.path, "--out", tmp_path / "ho").split())
    assert "0 created" in ho and "why: no failed attempt changed code" in ho and "--partial" in ho
    again = " ".join(cli("solve", calc_artifact.path, "--solver", "null", "--attempts", "1").split())
    assert "already has as many attempts as asked (raise --attempts, or --redo" in again
    gave_up = {"passed": False, "reason": "2 of 2 FAIL_TO_PASS test(s) do not pass", "fix_files": [],
               "solver_info": {"note": "gave up: no inverse mutation at the 25 most suspicious line(s)"}}
    assert reason(gave_up) == "no fix submitted: gave up: no inverse mutation at the 25 most suspicious line(s)"
    assert reason({**gave_up, "solver_info": {"exit_status": "LimitsExceeded"}}) == \
        "no fix submitted: LimitsExceeded"
    assert reason({**gave_up, "fix_files": ["calc/ops.py"]}) == gave_up["reason"]  # a fix that fails: the tests say
