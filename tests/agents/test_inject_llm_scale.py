"""`inject --agent llm` split and spread: --shard over 3 equals the unsharded run; --executor ray (a 3-node
cluster on this machine, the model server reached from the nodes) writes the same injections as local."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from fixtures.agents import make_by_turn, tiny_injector_steps
from fixtures.cli import in_process


def outcome(records: list[dict]) -> list[tuple]:
    return sorted((Path(r["path"]).name, r["id"], r["strategy"], r["exit_status"], r["valid"]) for r in records)


def test_three_shards_equal_unsharded(tiny_repo, serve, tmp_path, capsys):
    """In this process (fixtures.cli): what the shards inject together is the subject, not the interpreter."""
    cli = partial(in_process, capsys)
    server = serve(make_by_turn(tiny_injector_steps))
    base = ["inject", str(tiny_repo), "--agent", "llm", "--base-url", server.base_url, "--model", "scripted-model",
            "--n", "4", "--strategy", "removal", "--json"]
    res = cli(*base, "--out", str(tmp_path / "whole"))
    assert res.returncode == 0, res.stderr
    whole = json.loads(res.stdout)
    sharded = []
    for k in (1, 2, 3):
        res = cli(*base, "--out", str(tmp_path / "sharded"), "--shard", f"{k}/3")
        assert res.returncode == 0, res.stderr
        sharded += json.loads(res.stdout)
    assert len(whole) == 4 and outcome(sharded) == outcome(whole)
    assert all(r["valid"] for r in whole)


def test_ray_executor_same_injections_as_local(ray_cluster, tiny_repo, serve, tmp_path):
    from ssrkit.agents import ModelClient
    from ssrkit.store.config import load_config
    from ssrkit.executor import LocalExecutor
    from ssrkit.inject.llm import inject_llm
    from ssrkit.executor.ray import RayExecutor
    from ssrkit.store.source import RepoSource

    server = serve(make_by_turn(tiny_injector_steps))
    client = ModelClient(server.base_url, "scripted-model")
    cfg = load_config(None, tiny_repo)
    out = {}
    for label, ex in (("local", LocalExecutor(2)), ("ray", RayExecutor(3))):
        with ex:
            report = inject_llm(RepoSource.local(tiny_repo), tmp_path / label, client=client, n=3, seed=1,
                                mixture={"removal": 1.0}, config=cfg, executor=ex)
            records = [r.to_dict() for r in report.artifacts]
            stats = {k: v.to_dict() for k, v in report.stats.items()}
            if label == "ray":
                assert len(ex.nodes_used) > 1, ex.nodes_used
        out[label] = (records, stats)
    assert outcome(out["ray"][0]) == outcome(out["local"][0]) and out["ray"][1] == out["local"][1]
    for r in out["ray"][0]:
        d = Path(r["path"])
        local = tmp_path / "local" / d.name
        assert (d / "bug_inject.diff").read_text() == (local / "bug_inject.diff").read_text()
        v = json.loads((d / "validation.json").read_text())
        assert v["artifact"] == str(d) and v["valid"] and "ssrkit-unit-" not in (d / "trajectory.json").read_text()
