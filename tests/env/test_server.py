"""`ssrkit env serve` (OpenEnv over WebSocket): real episodes, concurrent sessions, bad input, vanished clients."""

from __future__ import annotations

import glob
import json
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fixtures.env_tier import FIX, EnvServer
from fixtures.scripted_server import bash, edit, submit


def client(srv):
    """OpenEnv's own client. Imported here, not at the top: openenv.core pulls in gradio (3-9 s), and every xdist
    worker imports each test module while it collects, before it knows which tests it will run."""
    from openenv.core import GenericEnvClient

    return GenericEnvClient(base_url=srv.url, message_timeout_s=600).sync()


def wait_live(srv, n: int, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while (live := srv.get("/ssrkit/info")["live_episodes"]) != n and time.monotonic() < deadline:
        time.sleep(0.2)
    return live


def test_an_oracle_episode_over_openenv_earns_plus_one_and_leaks_no_secret(env_server, slug_validated):
    assert env_server.get("/ssrkit/info")["ids"] == [slug_validated.id]
    with client(env_server) as env:
        r = env.reset(task=slug_validated.id)
        msgs = r.observation["messages"]
        assert [m["role"] for m in msgs] == ["system", "user"] and not r.done
        r = env.step({"message": bash("env; echo key=$OPENAI_API_KEY")})
        [obs] = r.observation["messages"]
        assert "exit code 0" in obs["content"] and "sk-env-secret" not in obs["content"]
        assert "key=\n" in obs["content"] or "key=" in obs["content"]
        env.step({"message": edit("src/textkit/slug.py", *FIX)})
        r = env.step({"message": submit()})
        assert r.done and r.reward == 1.0
        assert r.observation["result"]["passed"] and r.observation["result"]["exit_status"] == "submitted"
        assert env.state()["step_count"] == 3
    assert wait_live(env_server, 0) == 0
    # --record: the episode is an attempt of the artifact, graded like any other
    attempt = json.loads((slug_validated.path / "attempts" / r.observation["result"]["attempt"] / "eval.json").read_text())
    assert attempt["passed"] and attempt["solver"] == "env"


def test_concurrent_sessions_each_have_their_own_sandbox(env_server, slug_validated):
    def one(i: int) -> tuple[str, float | None]:
        with client(env_server) as env:
            env.reset(task=slug_validated.id)
            env.step({"message": bash(f"echo {i} > mine.txt")})
            time.sleep(0.5)  # all sessions are open at once here
            r = env.step({"message": bash("cat mine.txt; ls")})
            return r.observation["messages"][0]["content"], env.step({"message": "no tool call"}).reward

    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(one, range(3)))
    for i, (text, _) in enumerate(outs):
        assert f"<output>\n{i}\n" in text, text
    assert wait_live(env_server, 0) == 0


def test_bad_input_gets_a_clear_error_and_the_session_goes_on(env_server, slug_validated):
    with client(env_server) as env:
        with pytest.raises(RuntimeError, match="call reset"):
            env.step({"message": submit()})
        with pytest.raises(RuntimeError, match=r"unknown task 'nope'; this server has: " + slug_validated.id):
            env.reset(task="nope")
        env.reset(task=slug_validated.id)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR|Invalid"):
            env.step({"text": "no message field"})
        r = env.step({"message": bash("echo still here")})
        assert "still here" in r.observation["messages"][0]["content"]
        assert wait_live(env_server, 1) == 1
    assert wait_live(env_server, 0) == 0


def test_a_client_that_vanishes_mid_episode_has_its_sandbox_closed(env_server, slug_validated):
    import websockets.sync.client as ws

    conn = ws.connect(env_server.url.replace("http", "ws") + "/ws", open_timeout=30, legacy=True)
    conn.send(json.dumps({"type": "reset", "data": {"task": slug_validated.id}}))
    assert json.loads(conn.recv(timeout=120))["type"] == "observation"
    conn.send(json.dumps({"type": "step", "data": {"message": bash("sleep 2; echo done")}}))
    assert wait_live(env_server, 1) == 1
    # no close frame: the TCP connection is reset under the server mid-step
    conn.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    conn.socket.close()
    assert wait_live(env_server, 0, timeout=90) == 0


def test_an_unvalidated_artifact_or_no_task_is_refused_at_start(tmp_path, textkit_repo):
    from fixtures.repos import EXAMPLES, copy_artifact

    raw = copy_artifact(EXAMPLES / "artifacts" / "textkit" / "valid-slug-truncate-off-by-one", tmp_path / "raw")
    exe = str(Path(sys.executable).parent / "ssrkit")
    for args, expected in (([str(raw), "--repo", str(textkit_repo)], "validate"),
                           ([], "no artifact to serve"),
                           (["--pool", str(tmp_path / "no-run")], "no such run directory"),
                           (["--pool", str(tmp_path)], "its task pool has no active task")):
        res = subprocess.run([exe, "env", "serve", *args, "--port", "0"], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "COLUMNS": "300"})
        assert res.returncode != 0 and expected in res.stderr + res.stdout, res.stderr
        assert "Traceback" not in res.stderr


def test_sigterm_closes_every_sandbox(slug_validated, textkit_repo, server_config, tmp_path):
    """A session still open at SIGTERM is closed on the way out (its own server: the others' stays up)."""
    srv = EnvServer([str(slug_validated.path), "--repo", str(textkit_repo), "--config", str(server_config)],
                    cwd=tmp_path)
    try:
        env = client(srv)
        env.connect()
        env.reset(task=slug_validated.id)
        assert wait_live(srv, 1) == 1
        pid = srv.proc.pid
        assert glob.glob(f"/dev/shm/ssrkit-{pid}-*"), "the server's sandbox root is where the test looks for it"
    finally:
        code = srv.stop()
    assert code == 128 + 15  # ssrkit's exit status for SIGTERM
    out = srv.proc.stdout.read()
    assert "Traceback" not in out, out
    assert glob.glob(f"/dev/shm/ssrkit-{pid}-*") == []
