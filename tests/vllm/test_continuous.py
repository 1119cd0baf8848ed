"""Continuous self-play against the real vLLM (issue #28 "Done means"): producers and `train --follow` run together
for several steps on the session's server (lora strategy); every turn records the policy version that sampled
it; a producer made artificially slow yields rollouts that the staleness bound drops; no rollout is trained twice
or lost; kill -9 of the trainer mid-run and the same command again continue the version sequence.

A random tiny model solves nothing, so each producer marks its first attempt passed (a group with rewards +1, -1),
as test_real_vllm.py does: the grading is not under test here, the plumbing of versions and staleness is."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from fixtures.paths import SRC
from fixtures.vllm import LORA_RANK, artifact_copy, cli

from ssrkit.store import follow as store
from ssrkit.store.policy import read_version

pytestmark = pytest.mark.timeout(900)
STEPS = 3


def produce(run, name, validated, repo, server, config, before_reward=None):
    """One solver group: solve a copy of the task with the served policy (following its newest version), mark
    attempt 001 passed, reward."""
    art = artifact_copy(validated, run / "round-001" / "tasks" / "textkit" / name)
    cli("solve", art, "--repo", repo, "--solver", "llm", "--base-url", server.base_url, "--model", "policy",
        "--attempts", 2, "--temperature", 1.0, "--max-tokens", 48, "--max-turns", 2, "--config", config, "--json")
    if before_reward is not None:
        before_reward()
    ev = art / "attempts" / "001" / "eval.json"
    ev.write_text(json.dumps({**json.loads(ev.read_text()), "passed": True}))
    cli("reward", art, "--json")
    return art


def trainer(run, policy, server):
    cmd = [sys.executable, "-m", "ssrkit", "train", "--follow", run, "--model", policy, "--lora", "--lora-rank",
           LORA_RANK, "--lr", "1e-2", "--roles", "solver", "--mask-statuses", "error", "--groups-per-step", 1,
           "--max-staleness", 1, "--poll", 0.5, "--max-steps", STEPS, "--keep-checkpoints", 10, "--refresh-pid-file", server.pid_file]
    log = open(run / "trainer.log", "a")
    return subprocess.Popen(list(map(str, cmd)), stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": ""})


def committed(run):
    return [line["step"] for line in store.read_ledger(run) if line["trained"]]


def test_producers_and_a_following_trainer_with_staleness_and_a_kill(server, policy, repo, validated, work):
    started = time.monotonic()
    run = work / "continuous"
    (run / "round-001").mkdir(parents=True)
    config = run / "ssrkit.toml"
    config.write_text("[agent]\nfollow_policy = true\nserver_wait = 120\n")
    proc = trainer(run, policy, server)

    def slow():  # sampled at step 0, rewarded only once the trainer is two steps further
        def wait():
            deadline = time.monotonic() + 600
            while (store.read_state(run) or {}).get("step", 0) < 2 and time.monotonic() < deadline:
                time.sleep(0.5)
        produce(run, "slow", validated, repo, server, config, before_reward=wait)

    slow_thread = threading.Thread(target=slow, daemon=True)
    slow_thread.start()
    killed_at, k = None, 0
    while len(committed(run)) < STEPS and k < 10 and time.monotonic() - started < 600:
        if len(committed(run)) >= 2:  # the slow group is judged before the last step (--max-steps ends the run)
            slow_thread.join(timeout=300)
            deadline = time.monotonic() + 300  # under load (make selfplay beside it) 120 s was once too short
            while not any("slow" in g for line in store.read_ledger(run) for g in line["groups"]) \
                    and time.monotonic() < deadline:
                time.sleep(0.5)
        produce(run, f"g{k}", validated, repo, server, config)
        k += 1
        if killed_at is None and len(committed(run)) >= 2:
            killed_at = committed(run)[-1]
            os.kill(proc.pid, signal.SIGKILL)
            assert proc.wait(timeout=30) == -signal.SIGKILL
            proc = trainer(run, policy, server)  # the same command again
    slow_thread.join(timeout=300)
    assert proc.wait(timeout=300) == 0, (run / "trainer.log").read_text()[-3000:]

    # the version sequence: steps 1..STEPS once each, each a child of the one before, across the kill
    lines = store.read_ledger(run)
    steps = [line for line in lines if line["trained"]]
    assert killed_at is not None and [line["step"] for line in steps] == list(range(1, STEPS + 1))
    versions = [read_version(policy)] + [read_version(store.step_dir(run, n)) for n in range(1, STEPS + 1)]
    assert all(v.parent == p.id and v.step == p.step + 1 for p, v in zip(versions, versions[1:]))
    assert [line["policy_id"] for line in steps] == [v.id for v in versions[1:]]

    # every turn says which version sampled it, and some were sampled after a hot-swap
    from ssrkit.store.trajectory import turn_versions
    from ssrkit.train.stream import rollout_id

    paths = sorted(run.glob("round-001/tasks/textkit/*/attempts/*/trajectory.json"))
    turns = [v for p in paths for v in turn_versions(json.loads(p.read_text()))]
    ids = {v.step: v.id for v in versions}
    assert turns and all(v is not None and ids.get(v["step"]) == v["id"] for v in turns), turns
    assert max(v["step"] for v in turns) >= 1

    # the slow producer's rollouts were dropped as stale; nothing trained twice, nothing lost
    trained = [t["id"] for line in lines for t in line["trained"]]
    dropped = {d["id"]: d for line in lines for d in line["dropped"]}
    slow = [rollout_id(p) for p in paths if "/slow/" in str(p)]
    assert slow and all(dropped[i]["reason"] == "stale" and dropped[i]["staleness"] >= 2 for i in slow), \
        (dropped, (run / "trainer.log").read_text()[-3000:])
    complete = {rollout_id(p) for p in paths if (p.parents[2] / "reward.json").is_file()}
    assert len(trained) == len(set(trained)) and set(trained) | set(dropped) <= complete
    settled = {g for line in lines for g in line["groups"]}
    assert {rollout_id(p) for p in paths if str(p.parents[2].relative_to(run)) in settled} == \
        set(trained) | set(dropped)

    # the server ends on the last step; the report shows the steps
    sidecar = json.loads(server.pid_file.with_name(server.pid_file.name + ".json").read_text())
    assert sidecar["policy"] == versions[-1].turn()
    report = json.loads(cli("report", run, "--json", "--no-plots", "--no-learning").stdout)
    assert len(report["continuous"]["steps"]) == STEPS and report["continuous"]["totals"]["dropped"]["stale"] >= 2
    print(f"continuous test: {time.monotonic() - started:.0f} s, {k} fast groups, killed after step {killed_at}")
