"""report.py: sparkline and histogram units, and the report of a real run recomputed from the files on disk."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.recipe import recipe_env
from fixtures.runs import two_rounds_with_a_higher_order_artifact_made_twice
from ssrkit.runs.report import HISTOGRAM_BINS, histogram_bin, solve_rate_histogram, sparkline


def test_sparkline():
    assert sparkline([]) == "" and sparkline([None, None]) == ""
    assert sparkline([0.0, 0.5, 1.0]) == "▁▅█"
    assert sparkline([1.0, None, 3.0]) == "▁ █"  # a gap stays a gap
    assert sparkline([0.2, 0.2]) == "▁▁"  # a flat series on its own range
    assert sparkline([0.2, 0.2], 0, 1) == "▂▂"  # … and on a fixed one
    assert sparkline([-1.0, 0.0, 1.0], -1, 1) == "▁▅█"
    assert sparkline([2.0, -5.0], 0, 1) == "█▁"  # clipped to the scale


def test_histogram_bins():
    assert [histogram_bin(r) for r in (0.0, 0.125, 0.25, 0.26, 0.5, 0.75, 0.76, 0.99, 1.0)] == [
        "0%", "≤25%", "≤25%", "≤50%", "≤50%", "≤75%", "<100%", "<100%", "100%"]
    hist = solve_rate_histogram([0.0, 0.0, 1 / 3, 1.0])
    assert list(hist) == list(HISTOGRAM_BINS)  # every bin, in order, also the empty ones
    assert hist == {"0%": 2, "≤25%": 0, "≤50%": 1, "≤75%": 0, "<100%": 0, "100%": 1}


# -- a real run -----------------------------------------------------------------------------------------

def _artifacts(section: Path) -> list[Path]:
    """Artifact directories below a round's section, as a person would list them (no ssrkit code)."""
    if not section.is_dir():
        return []
    return sorted(p.parent for p in section.rglob("artifact.toml")
                  if not any(part.startswith(".") or part == "attempts"
                             for part in p.parent.relative_to(section).parts))


def _json(p: Path):
    return json.loads(p.read_text()) if p.is_file() else None


def recompute(run: Path) -> dict:
    """Every number the report shows, from validation.json, inject.json, attempts/*/eval.json, pool.json."""
    rounds = []
    rates_by_round: dict[str, list[float]] = {}
    higher_before: set[str] = set()
    for rd in sorted(run.glob("round-[0-9][0-9][0-9]")):
        new = _artifacts(rd / "inject")
        carried = _artifacts(rd / "tasks")
        valid = {a: bool((_json(a / "validation.json") or {}).get("valid")) for a in new + carried}
        discarded = 0
        for summary in (rd / "inject").rglob("inject.json"):
            for counts in json.loads(summary.read_text())["by_strategy"].values():
                discarded += counts["tried"] - counts["kept"]
        attempts = solved = 0
        inj, sol = [], []
        for a in new + carried:
            evals = [_json(e) for e in sorted((a / "attempts").glob("*/eval.json"))] if valid[a] else []
            passed = [bool(e["passed"]) for e in evals]
            attempts += len(passed)
            solved += sum(passed)
            sol += [1.0 if p else -1.0 for p in passed]
            s = sum(passed) / len(passed) if passed else None
            if s is not None:
                rates_by_round.setdefault(rd.name.split("-")[1].lstrip("0"), []).append(s)
            if a in new:
                inj.append(-1.0 if not valid[a] else -0.8 if s in (0.0, 1.0) else 1 - 1.8 * s)
            reward = _json(a / "reward.json")
            assert reward is not None, f"{a}: no reward.json"
            assert reward["n_attempts"] == len(passed) and reward["n_solved"] == sum(passed)
            if a in new:
                assert reward["injector_reward"] == pytest.approx(inj[-1])
        made = _artifacts(rd / "higher")  # a higher-order artifact an earlier round made already is not new
        higher = [a for a in made if (_json(a / "validation.json") or {}).get("valid") and a.name not in higher_before]
        higher_before |= {a.name for a in made}
        injected = len(new) + discarded
        rounds.append({
            "round": int(rd.name.split("-")[1]), "injected": injected, "valid": sum(valid[a] for a in new),
            "tasks": sum(valid.values()), "attempts": attempts, "solved": solved,
            "solve_rate": solved / attempts if attempts else None,
            "injector_reward_mean": sum(inj) / len(inj) if inj else None,
            "solver_reward_mean": sum(sol) / len(sol) if sol else None, "higher_order": len(higher)})
    pool = json.loads((run / "pool.json").read_text())["entries"]
    return {"rounds": rounds, "rates": rates_by_round,
            "pool_active": sum(1 for e in pool if e["retired"] is None),
            "pool_retired": sum(1 for e in pool if e["retired"] is not None)}


def assert_report_matches(run: Path, report: dict) -> dict:
    truth = recompute(run)
    assert len(report["rounds"]) == len(truth["rounds"]) >= 1
    metrics = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(m["round"]) for m in metrics] == [r["round"] for r in truth["rounds"]]
    for got, want, row in zip(report["rounds"], truth["rounds"], metrics):
        for key, value in want.items():
            if value is None or isinstance(value, float):
                assert (got[key] is None) == (value is None), key
                if value is not None:
                    assert got[key] == pytest.approx(value, abs=1e-4), key
                    assert float(row[key]) == pytest.approx(value, abs=1e-4), key
            else:
                assert got[key] == value, (key, got[key], value)
                assert int(row[key]) == value, key
        if want["injected"]:
            assert got["validity_rate"] == pytest.approx(want["valid"] / want["injected"], abs=1e-4)
    assert report["pool"] == {"active": truth["pool_active"], "retired": truth["pool_retired"]}
    assert report["rounds"][-1]["pool_size"] == truth["pool_active"]
    assert report["solve_rate_histogram"] == {str(r["round"]): solve_rate_histogram(truth["rates"].get(str(r["round"]), []))
                                              for r in truth["rounds"]}
    for (n, bins), want in zip(report["solve_rate_histogram"].items(), truth["rounds"]):
        assert sum(bins.values()) == len(truth["rates"].get(n, [])) <= want["tasks"]
    return truth


def test_report_matches_the_artifacts_on_disk(offline_run):
    saved = json.loads((offline_run / "report.json").read_text())  # written by the recipe
    truth = assert_report_matches(offline_run, saved)
    assert truth["rounds"][0]["attempts"] == 2 * truth["rounds"][0]["tasks"] > 0
    fresh = subprocess.run([sys.executable, "-m", "ssrkit", "report", str(offline_run), "--json", "--no-plots"],
                           capture_output=True, text=True, check=True, env=recipe_env())
    assert json.loads(fresh.stdout)["rounds"] == saved["rounds"]
    assert sorted(Path(p).name for p in saved["plots"]) == [
        "rates.png", "rewards.png", "solve_rate_histogram.png", "strategy_mix.png", "time.png"]


def test_report_without_matplotlib_says_so_and_still_reports(offline_run, tmp_path):
    """matplotlib is the `report` extra: without it the report is complete, with a one-line note instead of plots."""
    blocker = tmp_path / "site"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text("raise ImportError('blocked for this test')\n")
    env = recipe_env()
    env["PYTHONPATH"] = f"{blocker}:{env.get('PYTHONPATH', '')}"
    proc = subprocess.run([sys.executable, "-m", "ssrkit", "report", str(offline_run), "--json",
                           "--plots", str(tmp_path / "plots")], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "no plots: matplotlib is not installed (pip install 'ssrkit[report]')" in proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout)
    assert report["plots"] == [] and report["rounds"] and not (tmp_path / "plots").exists()


def test_a_directory_that_is_no_run_says_what_report_reads(tmp_path):
    from ssrkit.errors import SsrkitError
    from ssrkit.runs.report import build_report

    (tmp_path / "plain").mkdir()
    with pytest.raises(SsrkitError, match=r"no round-NNN directories: `ssrkit report` reads a self-play run "
                                          r"\(round-001/inject/<repo>/<id>/.*recipes/README.md\)$"):
        build_report(tmp_path / "plain")
    art = tmp_path / "arts" / "a1"
    art.mkdir(parents=True)
    (art / "bug_inject.diff").write_text("")
    with pytest.raises(SsrkitError, match="it holds artifacts: `ssrkit reward` scores them"):
        build_report(tmp_path / "arts")


def test_strategy_mix_counts_each_valid_artifact_once_and_the_histogram_is_per_round(tmp_path):
    """A higher-order artifact made in two rounds, and an invalid one, do not swell the mix; the histogram
    counts each round's tasks in that round (round.json's `tasks`), not task-rounds pooled over the run."""
    from ssrkit.runs.report import build_report, write_plots

    repo = tmp_path / "mylib"
    repo.mkdir()
    run = tmp_path / "run"
    two_rounds_with_a_higher_order_artifact_made_twice(run, repo)
    report = build_report(run)
    assert report["strategy_mix"] == {"expression": 2, "higher_order": 2}  # a, b; h1 (twice on disk), h3
    assert report["order_mix"] == {"1": 4}  # (hand-made: every one says order 1)
    assert (report["artifacts"], report["valid_artifacts"]) == (5, 4)  # h2 is made (twice) but invalid
    assert report["solve_rate_histogram"] == {
        "1": {"0%": 0, "≤25%": 0, "≤50%": 1, "≤75%": 0, "<100%": 0, "100%": 0},  # a: 1/3
        "2": {"0%": 1, "≤25%": 0, "≤50%": 0, "≤75%": 1, "<100%": 0, "100%": 0}}  # a: 0/3, b: 2/3
    assert [r["higher_order"] for r in report["rounds"]] == [1, 1]
    assert all(isinstance(r["validity_by_strategy"], dict) for r in report["rounds"])
    plots = write_plots(report, tmp_path / "plots")
    assert [p.name for p in plots][-1] == "time.png" and plots[-1].read_bytes()[:4] == b"\x89PNG"


def test_continuous_training_shows_per_step_staleness_drops_and_waits(tmp_path):
    """`train --follow`'s steps (RUN/follow/steps.jsonl) reach `ssrkit report`: totals in --json, a table in text;
    a run nobody follows has no `continuous` key (issue #28 item 4)."""
    from fixtures.runs import two_rounds_with_a_higher_order_artifact_made_twice
    from typer.testing import CliRunner

    from ssrkit.cli.main import app
    from ssrkit.runs.report import build_report
    from ssrkit.store.follow import append_steps_log

    repo = tmp_path / "mylib"
    repo.mkdir()
    run = tmp_path / "run"
    two_rounds_with_a_higher_order_artifact_made_twice(run, repo)
    assert "continuous" not in build_report(run, learning=False)
    for step, stale in ((1, 0), (2, 4)):
        append_steps_log(run, {"step": step, "rollouts": 10, "staleness": {"0": 6, "1": 4} if step == 1 else
                               {"0": 2, "3": 7, "unknown": 1}, "dropped": {"stale": stale, "zero_variance": 1},
                               "wait_s": 5.0, "step_s": 2.0, "save_s": 0.5, "refresh_s": 0.5, "producer_wait_s": 1.5,
                               "elapsed_s": 10.0 * step, "rollouts_per_hour": 3600.0})
    totals = build_report(run, learning=False)["continuous"]["totals"]
    assert totals["dropped"]["stale"] == 4 and totals["dropped"]["zero_variance"] == 2
    assert totals["staleness"] == {"0": 8, "1": 4, "3": 7, "unknown": 1} and totals["trained"] == 20
    assert totals["trainer_idle"] == pytest.approx(1 - 6.0 / 20.0)
    out = CliRunner().invoke(app, ["report", str(run), "--no-plots", "--no-learning"])
    assert out.exit_code == 0, out.output
    assert "continuous training" in out.output and "0:2 3:7 ?:1" in out.output and "trainer idle 70%" in out.output


def test_a_follower_without_a_step_yet_is_said(tmp_path):
    """A follower whose complete groups all settled without a step (every rollout dropped, or none trainable: a
    random policy's first run) still shows in the report, saying so, rather than as nothing at all."""
    from typer.testing import CliRunner

    from ssrkit.cli.main import app
    from ssrkit.runs.report import continuous_summary
    from ssrkit.store.follow import append_ledger

    run = tmp_path / "run"
    (run / "round-001").mkdir(parents=True)
    assert continuous_summary(run) is None
    append_ledger(run, {"step": 0, "policy_id": "p0", "groups": ["round-001/tasks/r/a", "round-001/tasks/r/b"],
                        "trained": [], "dropped": [{"id": f"sha256:{i}", "reason": "zero_variance"} for i in range(4)]})
    cont = continuous_summary(run)
    assert cont["steps"] == [] and cont["totals"]["groups"] == 2 and cont["totals"]["dropped"]["zero_variance"] == 4
    out = CliRunner().invoke(app, ["report", str(run), "--no-plots", "--no-learning"])
    assert out.exit_code == 0, out.output
    assert "no step yet; 2 complete group(s) settled, none trained; dropped: zero_variance 4" in out.output
