"""Model output read whole into memory (issue 26.4): every file a model hands over, or points a tool at, is sized
before it is read. A solver that makes a 900 MB sparse file and calls the edit tool on it, and an injector that
submits a 900 MB sparse bug_inject.diff, get a refusal saying so; ssrkit's memory stays small and nothing of the
file reaches the output directory. Each in a process of its own (its peak RSS is the measure), in the real local
sandbox, on both example repositories."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.paths import pythonpath

#: a sparse file of this size costs no disk, but reading it whole costs this much memory (twice, decoded)
BOMB = "900M"
#: the peak RSS of the process that ran the agent: well below the bomb's size (reading it would cost ≥ 900 MiB),
#: with room for the imports' own size, which varies with the platform and package versions (about 70 MiB here)
MAX_RSS_MB = 640

RUN = r"""
import json, sys
from pathlib import Path
from fixtures.scripted_server import ScriptedServer, bash, create, edit, submit
from ssrkit.agents import Agent, AgentConfig, ModelClient, Trajectory
from ssrkit.inject.llm import SUBMISSION_DIRNAME, run_llm_injection
from ssrkit.sandbox import open_sandbox
from ssrkit.store.source import RepoSource

role, repo, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
with open_sandbox(RepoSource.local(repo), "local") as sb:
    if role == "solver":
        script = [bash("truncate -s {bomb} big.py"), edit("big.py", "x", "y"), create("big.py", "ok"), submit()]
    else:
        sub = sb.scratch_path(SUBMISSION_DIRNAME)
        make = (f"cd {{sub}} && truncate -s {bomb} bug_inject.diff && echo x > test_weaken.diff && "
                "echo 'echo hi' > test_script.sh && echo tests/t.py > test_files.txt && echo 'print(1)' > test_parser.py")
        script = [bash(make), submit(), submit()]
    with ScriptedServer(script).start() as server:
        client = ModelClient(server.base_url, "scripted-model", backoff_s=0.01, max_backoff_s=0.02)
        config = AgentConfig(max_turns=6, command_timeout=30)
        if role == "solver":
            traj = Trajectory("solver", model=client.describe(), limits=config.to_dict(), path=out / "t.json")
            Agent(client, sb, config).run(traj, "You are a test agent.", "Do the task.")
            said = [m["content"] for m in traj.messages if m["role"] == "user"]
            error = None
        else:
            res = run_llm_injection(sb, client, out_dir=out / "art", strategy="removal", config=config)
            said = [m["content"] for m in json.loads(res.trajectory_path.read_text())["messages"] if m["role"] == "user"]
            error = res.error
# VmHWM: the peak of this process's own memory since its exec. Not ru_maxrss, which a process started by vfork
# inherits from its parent's peak (an xdist worker that loaded torch gave 642 MiB to a run that used 68)
hwm_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({{"rss_mb": hwm_kb // 1024, "said": said,
                  "error": error}}))
""".format(bomb=BOMB)


def run_agent(role: str, repo: Path, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": pythonpath()}
    proc = subprocess.run([sys.executable, "-c", RUN, role, str(repo), str(out)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def du(path: Path) -> int:
    """Bytes on disk below `path` (a sparse file counts what it occupies, a copied one its size)."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("name", ["textkit", "ledger"])
def test_the_edit_tool_sizes_a_file_before_reading_it(example_repos, name, tmp_path):
    got = run_agent("solver", example_repos[name], tmp_path)
    edit_said = next(s for s in got["said"] if "big.py" in s and "edit tool" in s)
    assert "900.0 MiB" in edit_said and "change it with bash" in edit_said
    assert any(s.startswith("Overwrote big.py") for s in got["said"])  # create replaces it without reading it
    assert got["rss_mb"] < MAX_RSS_MB, got["rss_mb"]


@pytest.mark.parametrize("name", ["textkit", "ledger"])
def test_a_submitted_file_is_sized_before_it_is_read(example_repos, name, tmp_path):
    got = run_agent("injector", example_repos[name], tmp_path)
    assert any("bug_inject.diff is 900.0 MiB, over the 2.0 MiB limit" in s for s in got["said"])  # told at submit
    assert "bug_inject.diff is 900.0 MiB" in got["error"]
    assert not (tmp_path / "art" / "bug_inject.diff").exists() and du(tmp_path) < 10 * 1024 * 1024
    assert got["rss_mb"] < MAX_RSS_MB, got["rss_mb"]
