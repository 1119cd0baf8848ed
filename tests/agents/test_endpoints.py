"""Several model servers behind one run (`--base-url` repeated): trajectories spread over the servers by
requests in flight, stick to one server, and move to another when theirs is killed mid-run — every
trajectory completes and records which server answered each turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fixtures.agents import make_by_turn, tiny_injector_steps
from fixtures.paths import FIXTURES, pythonpath
from ssrkit.agents.client import ModelError
from ssrkit.agents.endpoints import EndpointPool, base_urls, connect
from ssrkit.store.config import load_config
from ssrkit.inject.llm import inject_llm
from ssrkit.store.source import RepoSource


def test_base_urls_from_flags_commas_and_a_file(tmp_path):
    f = tmp_path / "servers.txt"
    f.write_text("# two replicas\nhttp://127.0.0.1:8001/v1\n\nhttp://127.0.0.1:8002/v1  # the second\n")
    assert base_urls(["http://a:1/v1", "http://b:2/v1,http://c:3/v1", str(f), "http://a:1/v1"]) == [
        "http://a:1/v1", "http://b:2/v1", "http://c:3/v1", "http://127.0.0.1:8001/v1", "http://127.0.0.1:8002/v1"]
    assert isinstance(connect(["http://a:1/v1", "http://b:2/v1"], "m"), EndpointPool)
    assert not isinstance(connect("http://a:1/v1", "m"), EndpointPool)
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(Exception, match="lists no URL"):
        base_urls([str(tmp_path / "empty.txt")])


def test_spread_sticky_and_failover_when_a_server_dies(tiny_repo, serve, tmp_path):
    # the server that dies is a process of its own, killed (SIGKILL) after answering 4 turns
    script = tmp_path / "script.py"
    script.write_text("from fixtures.agents import make_by_turn, tiny_injector_steps\n"
                      "SCRIPT = make_by_turn(tiny_injector_steps)\n")
    record = tmp_path / "victim.jsonl"
    victim = subprocess.Popen([sys.executable, str(FIXTURES / "scripted_server.py"), "--script", str(script),
                               "--record", str(record)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": pythonpath()})
    killed = threading.Event()

    def kill_after_four_turns():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if record.is_file() and record.read_text().count("chat/completions") >= 4:
                break
            time.sleep(0.02)
        victim.kill()
        killed.set()

    try:
        victim_url = victim.stdout.readline().strip()
        servers = [serve(make_by_turn(tiny_injector_steps)), serve(make_by_turn(tiny_injector_steps))]
        threading.Thread(target=kill_after_four_turns, daemon=True).start()
        urls = [servers[0].base_url, victim_url, servers[1].base_url]
        pool = connect(urls, "scripted-model", backoff_s=0.05, max_backoff_s=0.1)
        report = inject_llm(RepoSource.local(tiny_repo), tmp_path / "out", client=pool, n=6, jobs=3,
                            seed=2, mixture={"removal": 1.0}, config=load_config(None, tiny_repo))
        records = [r.to_dict() for r in report.artifacts]
    finally:
        victim.kill()
        victim.wait()
    assert killed.is_set()
    assert [r["valid"] for r in records] == [True] * 6, records  # every trajectory completed
    moved = 0
    first_servers = set()
    for r in records:
        traj = json.loads((Path(r["path"]) / "trajectory.json").read_text())
        seq = [t["server"] for t in traj["turns"]]
        assert seq and all(u in urls for u in seq)
        first_servers.add(seq[0])
        changes = sum(1 for a, b in zip(seq, seq[1:]) if a != b)
        assert changes <= 1  # sticky: a trajectory changes server only when its server dies
        if changes:
            moved += 1
            k = next(k for k in range(len(seq) - 1) if seq[k] != seq[k + 1])
            assert seq[k] == urls[1]  # it left the server that died
        assert traj["model"] == "scripted-model" and traj["base_url"] in urls
    assert len(first_servers) >= 2  # spread: trajectories started on more than one server
    assert moved >= 1
    assert pool.answered[0] > 0 and pool.answered[2] > 0


def test_every_server_down_is_one_clear_error():
    pool = connect(["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"], "m", max_retries=1, backoff_s=0.01)
    with pytest.raises(ModelError, match="every model server failed this turn"):
        pool.complete([{"role": "user", "content": "hi"}])
