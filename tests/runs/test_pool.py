"""The task pool and run directories (pool.py), on hand-made artifacts: no sandbox, no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.runs import inject_dir, make_artifact, two_rounds_with_a_higher_order_artifact_made_twice
from ssrkit.errors import SsrkitError
from ssrkit.store.fsutil import atomic_write_json
from ssrkit.runs.pool import (METRICS, POOL, Pool, close_round, read_metrics, repo_label, round_dir, round_metrics,
                         select_tasks)
from ssrkit.store.source import RepoSource


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    d = tmp_path / "mylib"
    d.mkdir()
    return d


def test_repo_label_is_the_directory_name(repo):
    assert repo_label(RepoSource.local(repo)) == "mylib"
    assert repo_label(RepoSource.from_image("ghcr.io/org/lib:py3.11")) == "ghcr.io_org_lib_py3.11"
    assert repo_label(None) == "unknown"


def test_select_mixes_old_and_new_in_the_given_ratio(tmp_path, repo):
    run = tmp_path / "run"
    for k in range(10):
        make_artifact(inject_dir(run, 1) / f"a{k}", repo, k, passed=[True, False])
    close_round(run, 1)
    assert len(Pool.load(run).active) == 10
    for k in range(4):
        make_artifact(inject_dir(run, 2) / f"b{k}", repo, 100 + k)

    carried = select_tasks(run, 2, n_new=4, old_ratio=0.5)
    assert len(carried) == 4  # r/(1-r)·n_new = 4 old for 4 new
    assert all(p.parent == round_dir(run, 2) / "tasks" / "mylib" for p in carried)
    for p in carried:  # a fresh copy: definition and validation, no attempts, reward or injector trajectory
        names = {x.name for x in p.iterdir()}
        assert {"bug_inject.diff", "artifact.toml", "validation.json"} <= names
        assert not names & {"attempts", "reward.json", "trajectory.json"}
    assert select_tasks(run, 2, n_new=4, old_ratio=0.5) == carried  # idempotent: the same choice, no new copies
    assert len(list((round_dir(run, 2) / "tasks" / "mylib").iterdir())) == 4

    assert len(select_tasks(run, 3, n_new=4, old_ratio=0.75)) == 10  # wants 12: the whole pool
    assert select_tasks(run, 4, n_new=4, old_ratio=0.0) == []
    with pytest.raises(SsrkitError, match="old-ratio"):
        select_tasks(run, 5, n_new=4, old_ratio=1.0)


def test_select_skips_a_half_copied_task(tmp_path, repo):
    run = tmp_path / "run"
    make_artifact(inject_dir(run, 1) / "a", repo, 1, passed=[True, False])
    close_round(run, 1)
    (round_dir(run, 2) / "inject").mkdir(parents=True)
    partial = round_dir(run, 2) / "tasks" / "mylib" / f".{Pool.load(run).active[0].id}.partial"
    partial.mkdir(parents=True)
    (partial / "bug_inject.diff").write_text("half")  # a killed copy
    carried = select_tasks(run, 2, n_new=1, old_ratio=0.5)
    assert len(carried) == 1 and (carried[0] / "artifact.toml").is_file() and not partial.exists()


@pytest.mark.parametrize("field,value", [("id", "../../../../victim"), ("repo", ".."), ("path", "../../elsewhere")])
def test_pool_records_never_steer_a_copy_outside_the_run(tmp_path, repo, field, value):
    """pool.json names where carried tasks are copied (round-N/tasks/<repo>/<id>, a `.<id>.partial` removed
    first) and what is copied: an edited record is refused, and nothing outside the run is written or removed."""
    run = tmp_path / "run"
    make_artifact(inject_dir(run, 1) / "a", repo, 1, passed=[True, False])
    close_round(run, 1)
    (round_dir(run, 2) / "inject").mkdir(parents=True)
    data = json.loads((run / POOL).read_text())
    data["entries"][0][field] = value
    (run / POOL).write_text(json.dumps(data))
    with pytest.raises(SsrkitError, match="pool.json: .*(not a name|not inside the run)"):
        select_tasks(run, 2, n_new=1, old_ratio=0.5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mylib", "run"]


def test_retire_rules(tmp_path, repo):
    run = tmp_path / "run"
    # always solved, never solved, mixed
    make_artifact(inject_dir(run, 1) / "easy", repo, 1, passed=[True, True])
    make_artifact(inject_dir(run, 1) / "hard", repo, 2, passed=[False, False])
    make_artifact(inject_dir(run, 1) / "mid", repo, 3, passed=[True, False])
    row = close_round(run, 1, retire_after=2)
    assert row["pool_size"] == 3 and row["pool_retired"] == 0  # one round is not enough to judge

    for name, k, passed in (("easy", 1, [True, True]), ("hard", 2, [False, False]), ("mid", 3, [False, False])):
        make_artifact(round_dir(run, 2) / "tasks" / "mylib" / name, repo, k, passed=passed)
    row = close_round(run, 2, retire_after=2)
    pool = Pool.load(run)
    by_id = {e.path.split("/")[-1]: e for e in pool.entries.values()}
    assert by_id["easy"].retired == "always solved in its last 2 rounds" and by_id["easy"].retired_round == 2
    assert by_id["hard"].retired == "never solved in its last 2 rounds"
    assert by_id["mid"].active and by_id["mid"].solve_rates == {"1": 0.5, "2": 0.0}
    assert (row["pool_size"], row["pool_retired"]) == (1, 2)
    assert (round_metrics(run, 1, pool)["pool_size"], round_metrics(run, 1, pool)["pool_retired"]) == (3, 0)


def test_close_is_idempotent_and_metrics_keep_one_row_per_round(tmp_path, repo):
    run = tmp_path / "run"
    make_artifact(inject_dir(run, 1) / "a", repo, 1, passed=[True, False, False, False])
    make_artifact(inject_dir(run, 1) / "b", repo, 2, valid=False)
    atomic_write_json(inject_dir(run, 1) / "inject-1-of-2.json",  # two shards' records in one directory
                      {"by_strategy": {"expression": {"tried": 3, "valid": 1, "kept": 1}}})
    atomic_write_json(inject_dir(run, 1) / "inject-2-of-2.json", {"by_strategy": {"expression": {"tried": 2}}})
    first = close_round(run, 1)
    pool_text, metrics_text = (run / POOL).read_text(), (run / METRICS).read_text()
    again = close_round(run, 1)
    assert again == first
    assert (run / POOL).read_text() == pool_text and (run / METRICS).read_text() == metrics_text
    rows = read_metrics(run)
    assert [r["round"] for r in rows] == ["1"]
    assert first["injected"] == 6  # 2 artifacts + 4 candidates the injector discarded
    assert first["valid"] == 1 and first["validity_rate"] == round(1 / 6, 4)
    assert first["validity_by_strategy"] == {"expression": "1/6"}  # an object, in round.json and report.json
    assert json.loads(read_metrics(run)[0]["validity_by_strategy"]) == {"expression": "1/6"}  # JSON in the CSV
    assert (first["tasks"], first["attempts"], first["solved"], first["solve_rate"]) == (1, 4, 1, 0.25)
    assert first["injector_reward_mean"] == round((1 - 1.8 * 0.25 - 1.0) / 2, 4)  # valid a, invalid b (−1)
    assert first["solver_reward_mean"] == -0.5
    assert first["solve_seconds"] == 4 * (2.0 + 3.0)  # grading plus solver time
    assert len(Pool.load(run).entries) == 1  # only the valid artifact joins

    make_artifact(inject_dir(run, 2) / "c", repo, 3, passed=[True])
    close_round(run, 2)
    close_round(run, 1)  # re-closing an earlier round rewrites its row in place
    assert [r["round"] for r in read_metrics(run)] == ["1", "2"]
    with pytest.raises(SsrkitError, match="does not exist"):
        close_round(run, 7)


def test_a_higher_order_artifact_made_again_in_a_later_round_is_not_counted_again(tmp_path, repo):
    run = tmp_path / "run"
    two_rounds_with_a_higher_order_artifact_made_twice(run, repo)
    rows = read_metrics(run)
    assert [int(r["higher_order"]) for r in rows] == [1, 1]  # h1 in round 1; only h3 is new in round 2
    assert json.loads((round_dir(run, 2) / "round.json").read_text())["higher_order"] == 1
    assert sorted(e.path.split("/")[-1] for e in Pool.load(run).entries.values()) == ["a", "b", "h1", "h3"]
