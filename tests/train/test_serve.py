"""Serving against a real process: a fake `vllm` on PATH that answers over HTTP (no mocks)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ssrkit.serve import PolicyServer, ServeConfig, ServeError

pytestmark = pytest.mark.train
HERE = Path(__file__).parent
SRC = HERE.parents[1] / "src"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(f"#!{sys.executable}\n" + (HERE / "fake_vllm.py").read_text())
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_VLLM_CHILD_PID", str(tmp_path / "child.pid"))
    return script


def config(tmp_path, **kw) -> ServeConfig:
    return ServeConfig(
        **{
            "port": free_port(),
            "ready_timeout": 20,
            "stop_timeout": 5,
            "poll_interval": 0.05,
            "log_file": tmp_path / "server.log",
            **kw,
        }
    )


def test_start_refresh_by_restart_and_stop(fake_vllm, tmp_path):
    server = PolicyServer(config(tmp_path))
    with server:
        server.start(tmp_path / "ckpt-a")
        assert server.models() == [str(tmp_path / "ckpt-a")] and server.model == str(tmp_path / "ckpt-a")
        first_pid = server.process.pid
        child = int((tmp_path / "child.pid").read_text())
        assert alive(child)
        server.refresh(tmp_path / "ckpt-b")
        assert server.models() == [str(tmp_path / "ckpt-b")] and server.checkpoint == str(tmp_path / "ckpt-b")
        assert server.process.pid != first_pid and not alive(first_pid)
        assert not alive(child)  # the old group went with its leader
        second_child = int((tmp_path / "child.pid").read_text())
    assert server.process is None and not alive(second_child)
    assert "fake vllm serving" in (tmp_path / "server.log").read_text()


def test_served_model_name_and_lora_hot_swap(fake_vllm, tmp_path):
    with PolicyServer(config(tmp_path, served_model_name="policy", strategy="lora")) as server:
        server.start(tmp_path / "base")
        pid = server.process.pid
        assert server.models() == ["policy"]
        server.refresh(tmp_path / "adapter-1")
        assert server.model == "policy-1" and server.models() == ["policy", "policy-1"]
        server.refresh(tmp_path / "adapter-2")
        assert server.models() == ["policy", "policy-2"] and server.process.pid == pid  # no restart
        server.refresh(tmp_path / "adapter-3")  # a fresh name each time: vLLM refuses one already loaded
        assert server.model == "policy-3" and server.models() == ["policy", "policy-3"]


def test_failures_are_reported(fake_vllm, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_FAIL", "1")
    with pytest.raises(ServeError, match="exited with code 3"):
        PolicyServer(config(tmp_path)).start("ckpt")
    monkeypatch.delenv("FAKE_VLLM_FAIL")

    monkeypatch.setenv("FAKE_VLLM_DELAY", "30")
    server = PolicyServer(config(tmp_path, ready_timeout=1.0))
    started = time.monotonic()
    with pytest.raises(ServeError, match="not ready after 1 s"):
        server.start("ckpt")
    assert time.monotonic() - started < 10 and server.process is None
    assert not alive(int((tmp_path / "child.pid").read_text()))
    monkeypatch.delenv("FAKE_VLLM_DELAY")

    with pytest.raises(ServeError, match="command not found: no-such-vllm"):
        PolicyServer(ServeConfig(command=["no-such-vllm", "serve"])).start("ckpt")

    with PolicyServer(config(tmp_path)) as server:
        server.start("ckpt")
        with pytest.raises(ServeError, match="already in use"):
            PolicyServer(ServeConfig(port=server.config.port)).start("other")


def test_cli_detach_and_stop(fake_vllm, tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    run = [sys.executable, "-c", "from ssrkit.cli.serve import main; main()"]
    pid_file = tmp_path / "vllm.pid"
    proc = subprocess.run(
        [
            *run,
            str(tmp_path / "ckpt"),
            "--port",
            str(port),
            "--served-model-name",
            "policy",
            "--detach",
            "--pid-file",
            str(pid_file),
            "--log",
            str(tmp_path / "v.log"),
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["base_url"] == f"http://127.0.0.1:{port}/v1" and info["model"] == "policy"
    pid = int(pid_file.read_text())
    assert alive(pid)
    proc = subprocess.run(
        [*run, "--stop", "--pid-file", str(pid_file)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid) and not pid_file.exists()

    proc = subprocess.run(
        [*run, "ckpt", "--command", "no-such-vllm serve", "--port", str(port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stderr.strip() == "error: command not found: no-such-vllm"


def test_cli_foreground_stops_its_group_on_sigterm(fake_vllm, tmp_path):
    import signal

    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from ssrkit.cli.serve import main; main()", "ckpt", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert f"at http://127.0.0.1:{port}/v1" in line, proc.stderr.read() if proc.poll() is not None else line
    child = int((tmp_path / "child.pid").read_text())
    assert alive(child)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    deadline = time.monotonic() + 10
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(child)
