"""`--shard K/N`: N shards of validate, solve and higher-order together equal the unsharded run; procedural
inject shards evaluate disjoint candidates; usage errors and a missing ray extra are clear (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from fixtures.cli import in_process
from fixtures.cluster import SAMPLE, sample_items, verdict
from fixtures.paths import SRC
from fixtures.solving import TouchTheBuggyFile
from ssrkit.errors import SsrkitError
from ssrkit.store.artifact import Artifact
from ssrkit.executor import Shard
from ssrkit.solve import Engine, SolveOptions


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ssrkit", *args], capture_output=True, text=True, env=env,
                          timeout=900)


def by_name(records: list[dict], key: str = "artifact") -> dict[str, dict]:
    return {Path(r[key]).name + ("/" + r["attempt"] if "attempt" in r else ""): r for r in records}


def test_shards_partition_and_share():
    ids = [f"{i:012x}" for i in range(300)]
    shards = [Shard.parse(f"{k}/3") for k in (1, 2, 3)]
    parts = [{i for i in ids if s.owns(i)} for s in shards]
    assert set().union(*parts) == set(ids) and sum(map(len, parts)) == len(ids)
    assert all(len(p) > 50 for p in parts)  # a hash, not a range: every shard gets some
    assert sum(s.share(10) for s in shards) == 10 and [s.share(10) for s in shards] == [4, 3, 3]
    assert [i for i in range(9) if shards[1].owns_index(i)] == [1, 4, 7]
    for bad in ("0/3", "4/3", "3", "a/b", "1/0"):
        with pytest.raises(SsrkitError, match="--shard"):
            Shard.parse(bad)


def test_validate_solve_higher_order_three_shards_equal_unsharded(example_repos, tmp_path, capsys):
    """In this process (fixtures.cli): what the shards compute together is the subject, not the interpreter
    (12 commands; test_executor_ray_without_the_extra_names_it keeps a subprocess)."""
    cli = partial(in_process, capsys)
    runs = {}
    for label in ("whole", "sharded"):
        items = sample_items(example_repos, tmp_path / label, record_repo=True)
        root = tmp_path / label
        shards = [None] if label == "whole" else ["1/3", "2/3", "3/3"]
        validated, solved, higher = [], [], []
        for s in shards:
            extra = ["--shard", s] if s else []
            res = cli("validate", str(root), "--jobs", "2", "--json", *extra)
            assert res.returncode in (0, 1), res.stderr
            validated += json.loads(res.stdout)
        for s in shards:
            extra = ["--shard", s] if s else []
            # 8 test runs: the repair finds its fix on two parents within 6, and on the two-file bug (which it
            # never fixes) it gives up after 8 runs instead of spending ~18 (most of this test's time)
            res = cli("solve", str(root), "--solver", "repair", "--partial", "--attempts", "2", "--budget-runs", "8",
                      "--jobs", "2", "--json", *extra)
            assert res.returncode == 0, res.stderr
            solved += json.loads(res.stdout)
        # a failed attempt whose fix changes code on every valid parent (the partial repair finds none here), so
        # the shards of higher-order have something to stack
        valid = [(Artifact(a.path), repo) for a, repo in items if Artifact(a.path).is_valid]
        Engine(SolveOptions(jobs=2)).solve(valid, TouchTheBuggyFile(), attempts=3)
        for s in shards:
            extra = ["--shard", s] if s else []
            res = cli("higher-order", str(root), "--out", str(tmp_path / f"{label}-higher"), "--json", *extra)
            assert res.returncode == 0, res.stderr
            higher += json.loads(res.stdout)
        runs[label] = (validated, solved, higher, items)
    whole, sharded = runs["whole"], runs["sharded"]
    assert len(whole[0]) == len(SAMPLE) == len(sharded[0])
    w, s = by_name(whole[0]), by_name(sharded[0])
    assert sorted(w) == sorted(s) and all(verdict(w[k]) == verdict(s[k]) for k in w)
    w, s = by_name(whole[1]), by_name(sharded[1])
    assert sorted(w) == sorted(s) and len(w) >= 4
    assert {w[k]["passed"] for k in w} == {True, False}  # fixed and unfixed parents, both compared
    assert all((w[k]["passed"], w[k]["reason"]) == (s[k]["passed"], s[k]["reason"]) for k in w)
    key = lambda r: (Path(r["parent"]).name, r["attempt"], r["status"], r.get("id"), r.get("valid"))  # noqa: E731
    assert sorted(map(key, whole[2])) == sorted(map(key, sharded[2]))
    made = sorted(p.name for p in (tmp_path / "whole-higher").iterdir() if not p.name.startswith("."))
    assert made == sorted(p.name for p in (tmp_path / "sharded-higher").iterdir() if not p.name.startswith("."))
    assert len(made) >= 2, whole[2]


def test_usage_errors_exit_2(example_repos, tmp_path, capsys):
    """In this process (fixtures.cli): the exit code and the message are the subject, not the interpreter."""
    cli = partial(in_process, capsys)
    items = sample_items(example_repos, tmp_path, SAMPLE[:1], record_repo=True)
    res = cli("validate", str(items[0][0].path), "--shard", "4/3")
    assert res.returncode == 2 and "K must be between 1 and N" in res.stderr
    res = cli("higher-order", str(items[0][0].path), "--out", str(tmp_path / "h"), "--max", "1", "--shard", "1/2")
    assert res.returncode == 2 and "drop --shard or --max" in res.stderr
    res = cli("validate", str(items[0][0].path), "--executor", "dask")
    assert res.returncode == 2 and "unknown executor 'dask'" in res.stderr
    (tmp_path / "ssrkit.toml").write_text('[run]\nexecutor = "dask"\n')  # the config's default executor
    res = cli("validate", str(items[0][0].path), "--config", str(tmp_path / "ssrkit.toml"))
    assert res.returncode == 2 and "unknown executor 'dask'" in res.stderr
    res = cli("inject", str(example_repos["textkit"]), "--out", str(tmp_path / "o"), "--executor", "dask")
    assert res.returncode == 2 and "unknown executor 'dask'" in res.stderr and "Traceback" not in res.stderr


def test_executor_ray_without_the_extra_names_it(example_repos, tmp_path):
    fake = tmp_path / "noray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    items = sample_items(example_repos, tmp_path, SAMPLE[:1], record_repo=True)
    res = cli("validate", str(items[0][0].path), "--executor", "ray",
              env={"PYTHONPATH": f"{tmp_path / 'noray'}{os.pathsep}{SRC}"})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "ssrkit[ray]" in res.stderr and "Traceback" not in res.stderr
    assert not (items[0][0].path / "validation.json").exists()


def test_procedural_inject_shards_take_disjoint_candidates(example_repos, tmp_path, capsys):
    cli = partial(in_process, capsys)  # in this process, as above
    found: dict[str, int] = {}
    for k in (1, 2, 3):
        out = tmp_path / f"shard-{k}"
        res = cli("inject", str(example_repos["textkit"]), "--out", str(out), "--n", "3", "--strategy", "expression",
                  "--seed", "3", "--shard", f"{k}/3", "--json")
        assert res.returncode == 0, res.stderr
        arts = json.loads(res.stdout)
        assert len(arts) == 1  # its share of --n 3
        for a in arts:
            meta = (Path(a["path"]) / "artifact.toml").read_text()
            index = int(next(line for line in meta.splitlines() if line.startswith("candidate")).split("=")[1])
            assert index % 3 == k - 1
            assert json.loads((Path(a["path"]) / "validation.json").read_text())["valid"]
            assert a["id"] not in found
            found[a["id"]] = k
