"""recipes/selfplay.mk offline (procedural injector, repair solver, local sandbox), run through make for real."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
import tomllib
from pathlib import Path

from fixtures.paths import ROOT
from fixtures.recipe import OFFLINE_ARGS, recipe_cmd, recipe_env, run_recipe

STEPS = ["start", "inject-calc", "validate-calc", "select", "solve-calc", "reward-calc", "higher-calc", "close",
         "train", "end"]


def snapshot(run: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(run)): (p.stat().st_mtime_ns, p.stat().st_size)
            for p in run.rglob("*") if p.is_file()}


def attempts_of(run: Path) -> dict[str, list[str]]:
    """artifact id → its finished attempts, for every artifact solved in round 1."""
    out = {}
    for d in (run / "round-001").glob("*/*/*/attempts"):
        out[d.parent.name] = sorted(a.name for a in d.iterdir() if (a / "eval.json").is_file())
    return out


def test_an_offline_round_writes_the_run(offline_run, calc_profile_repo):
    run = offline_run
    rd = run / "round-001"
    assert sorted(p.name for p in (rd / ".done").iterdir()) == sorted(STEPS)
    cfg = tomllib.loads((run / "ssrkit.toml").read_text())
    assert cfg["run"]["mode"] == "offline" and cfg["run"]["repos"] == [str(calc_profile_repo)]
    assert (cfg["run"]["n"], cfg["run"]["attempts"], cfg["run"]["solver"]) == (2, 2, "repair")
    assert cfg["solve"]["hide"] == [str(run.resolve())]  # the solver never sees the run (other rounds' bugs)
    assert cfg["reward"]["alpha"] == 0.8
    assert (rd / "ssrkit.toml").read_text() == (run / "ssrkit.toml").read_text()

    arts = sorted((rd / "inject" / "calc").glob("*/artifact.toml"))
    assert len(arts) == 2
    for a in arts:
        a = a.parent
        assert json.loads((a / "validation.json").read_text())["valid"]
        assert sorted(p.name for p in (a / "attempts").iterdir()) == ["001", "002"]
        assert json.loads((a / "reward.json").read_text())["n_attempts"] == 2
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert [r["round"] for r in rows] == ["1"] and rows[0]["attempts"] == "4"
    pool = json.loads((run / "pool.json").read_text())["entries"]
    assert {e["id"] for e in pool} >= {a.parent.name for a in arts}
    assert all(e["repo"] == "calc" and e["solve_rates"].keys() == {"1"} for e in pool if e["added_round"] == 1
               and e["path"].startswith("round-001/inject"))
    report = json.loads((run / "report.json").read_text())
    assert report["rounds"][0]["tasks"] == 2
    for png in report["plots"]:
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (rd / "logs" / "solve-calc.log").stat().st_size > 0  # the commands' tables, out of the way


def test_a_second_invocation_does_nothing(offline_run, calc_profile_repo):
    before = snapshot(offline_run)
    t0 = time.monotonic()
    proc = run_recipe(offline_run, [calc_profile_repo], *OFFLINE_ARGS)
    took = time.monotonic() - t0
    assert snapshot(offline_run) == before  # not a file written, not even rewritten with the same content
    assert "valid /" in proc.stdout  # it still shows the report
    assert took < 20, f"a finished run took {took:.1f}s to re-check"
    status = run_recipe(offline_run, [calc_profile_repo], *OFFLINE_ARGS, target="status")
    assert "round 001: done" in status.stdout


def test_an_interrupted_round_finishes_with_the_same_attempts(offline_run, calc_profile_repo, tmp_path):
    """Kill the recipe's whole process group mid-solve, run it again: the round ends as if never stopped."""
    run = tmp_path / "run"
    proc = subprocess.Popen(recipe_cmd(run, [calc_profile_repo], *OFFLINE_ARGS), cwd=ROOT, env=recipe_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if any((run / "round-001" / "inject").glob("*/*/attempts/*")):
                break  # the solver is at work
            time.sleep(0.05)
        assert proc.poll() is None, "the round finished before it could be interrupted"
        os.killpg(proc.pid, signal.SIGTERM)  # what `kill` and a closing terminal send, to every process
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    done = {p.name for p in (run / "round-001" / ".done").iterdir()}
    assert "solve-calc" not in done and "end" not in done  # no stamp for the step that was cut short

    run_recipe(run, [calc_profile_repo], *OFFLINE_ARGS)
    assert (run / "round-001" / ".done" / "end").is_file()
    expected = attempts_of(offline_run)  # the same seed on the same repository: the same artifacts
    assert attempts_of(run) == expected and all(v == ["001", "002"] for v in expected.values())
    for d in (run / "round-001").glob("*/*/*/attempts/*"):
        assert (d / "eval.json").is_file() and (d / "fix.diff").is_file()  # nothing half-written is left
    assert not list(run.rglob(".*.partial")) and not list(run.rglob(".staging"))
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    ref = list(csv.DictReader((offline_run / "metrics.csv").open()))
    same = ("injected", "valid", "tasks", "attempts", "solved", "higher_order", "pool_size")
    assert [{k: r[k] for k in same} for r in rows] == [{k: r[k] for k in same} for r in ref]
