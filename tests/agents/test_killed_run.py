"""A run killed mid-way leaves a valid trajectory holding every step it finished."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from fixtures.paths import pythonpath
from fixtures.scripted_server import bash
from ssrkit.agents import Trajectory

CHILD = """
import sys
from pathlib import Path
from fixtures.subprocess_sandbox import SubprocessSandbox
from ssrkit.agents import Agent, AgentConfig, ModelClient, Trajectory
repo, work, url, out = sys.argv[1:5]
sandbox = SubprocessSandbox(Path(repo), Path(work))
client = ModelClient(url, "scripted-model")
traj = Trajectory("injector", model=client.describe(), limits={}, path=Path(out))
Agent(client, sandbox, AgentConfig(max_turns=1000)).run(traj, "system", "task")
"""


def test_killed_run_keeps_its_turns(serve, tiny_repo, tmp_path):
    def rule(messages, body):
        k = sum(m["role"] == "assistant" for m in messages)
        return {"content": bash(f"echo turn {k}"), "delay": 0.05}

    server = serve(rule, token_ids="vllm")
    out = tmp_path / "trajectory.json"
    env = dict(os.environ, PYTHONPATH=pythonpath())
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tiny_repo), str(tmp_path / "work"),
                              server.base_url, str(out)], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        turns = 0
        while turns < 5 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.02)
            if out.exists():
                turns = len(json.loads(out.read_text())["turns"])
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    assert turns >= 5, "the child did not get far enough"
    data = Trajectory.load(out)
    assert data["exit_status"] == "running" and data["ended"] is None
    assert len(data["turns"]) >= 5
    for k, turn in enumerate(data["turns"]):
        msg = data["messages"][turn["message_index"]]
        assert msg["role"] == "assistant" and f"echo turn {k}" in msg["content"]
    assert f"turn {len(data['turns']) - 2}" in json.dumps(data["messages"])  # outputs were kept too
    assert len(server.chat_requests) >= len(data["turns"])
