"""A detached server's records (PID_FILE and its .json sidecar) steer a kill: `ssrkit serve --stop` and a refresh
act on the recorded process group only while its leader is the process that was recorded (its start time), so a
stale record — after a reboot or a crash the number may name another program's group — stops nothing."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from ssrkit.serving import ServeError, attach_detached, sidecar_path, start_time, stop_detached


@pytest.fixture
def group():
    """A process group of its own (`sleep`), like a detached server's; killed after the test."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def record(pid_file, pid: int, started: str | None) -> None:
    pid_file.write_text(f"{pid}\n")
    state = {"pid": pid, "host": "127.0.0.1", "port": 1, "strategy": "restart", "served_model_name": None,
             "command": ["vllm", "serve"], "args": [], "env": {}, "log": None, "ready_timeout": 1.0,
             "checkpoint": "ckpt", "model": "m"}
    if started is not None:
        state["started"] = started
    sidecar_path(pid_file).write_text(json.dumps(state))


@pytest.mark.parametrize("started", ["1", None], ids=["another-start-time", "no-start-time"])
def test_a_record_of_another_process_stops_nothing(group, tmp_path, started):
    pid_file = tmp_path / "vllm.pid"
    for act in (stop_detached, attach_detached):
        record(pid_file, group.pid, started)
        with pytest.raises(ServeError, match=f"process {group.pid} is not the server recorded"):
            act(pid_file)
        assert group.poll() is None and not pid_file.exists() and not sidecar_path(pid_file).exists()


def test_the_recorded_process_is_stopped(group, tmp_path):
    pid_file = tmp_path / "vllm.pid"
    record(pid_file, group.pid, start_time(group.pid))
    assert stop_detached(pid_file, stop_timeout=5) == group.pid
    deadline = time.monotonic() + 5
    while group.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group.poll() is not None and not pid_file.exists()
