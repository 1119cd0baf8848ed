"""Serving against a real process: a fake `vllm` on PATH that answers over HTTP (no mocks)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from fixtures.net import free_port
from fixtures.paths import FIXTURES, SRC
from ssrkit.serving import NCCLStrategy, PolicyServer, ServeConfig, ServeError, VLLMNCCLTransport

pytestmark = pytest.mark.train


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
    script.write_text(f"#!{sys.executable}\n" + (FIXTURES / "fake_vllm.py").read_text())
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


def test_not_ready_until_a_generation_comes_back(fake_vllm, tmp_path, monkeypatch):
    """vLLM answers /health and /v1/models before its engine has run anything; one that dies on the first
    request (a model the backend cannot run) must not count as ready."""
    monkeypatch.setenv("FAKE_VLLM_NO_GENERATE", "1")
    with pytest.raises(ServeError, match="not ready after 2 s"):
        PolicyServer(config(tmp_path, ready_timeout=2.0)).start("ckpt")


def test_launch_asks_for_processed_logprobs_and_the_checkpoint_dtype(fake_vllm, tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"dtype": "float32"}))
    cmd = PolicyServer(config(tmp_path)).command(str(ckpt))
    assert cmd[:2] == [str(fake_vllm), "serve"] or cmd[:2] == ["vllm", "serve"]
    assert cmd[2] == str(ckpt)
    assert "--logprobs-mode processed_logprobs --dtype float32" in " ".join(cmd)
    # the user's own choice wins, and is not given twice
    cmd = PolicyServer(config(tmp_path, args=["--dtype", "bfloat16", "--logprobs-mode=raw_logprobs"])).command(str(ckpt))
    assert cmd.count("--dtype") == 1 and "processed_logprobs" not in cmd and "bfloat16" in cmd


def test_a_broken_vllm_script_falls_back_to_the_module_entry_point(tmp_path, monkeypatch):
    """The community CPU build installs a `vllm` script that cannot find its own package metadata."""
    from ssrkit.serving import MODULE_ENTRY

    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    python = bin_dir / "python"
    python.symlink_to(sys.executable)
    script = bin_dir / "vllm"
    script.write_text(f"#!{python}\nimport sys\nsys.exit('PackageNotFoundError: vllm')\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cmd = PolicyServer(config(tmp_path)).command("ckpt")
    assert cmd[:5] == [str(python), "-m", MODULE_ENTRY, "--model", "ckpt"]


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


# -- the nccl strategy: HTTP control plane for real, gloo standing in for NCCL ----------------------------------

PUSH = ["/pause", "/start_weight_update", "/update_weights", "/finish_weight_update", "/resume"]


def fake_state(server: PolicyServer) -> dict:
    with urllib.request.urlopen(f"{server.url}/fake/weights", timeout=5) as response:
        return json.loads(response.read())


def checkpoint_digests(checkpoint: Path) -> dict:
    """What the server should hold after a push of `checkpoint`: sha256, dtype and shape of every tensor."""
    import hashlib

    import torch
    from safetensors.torch import load_file

    out = {}
    for f in checkpoint.glob("*.safetensors"):
        for name, t in load_file(f).items():
            data = t.contiguous().view(torch.uint8).numpy().tobytes()
            out[name] = {"sha256": hashlib.sha256(data).hexdigest(), "dtype": str(t.dtype).split(".")[-1],
                         "shape": list(t.shape)}
    return out


def bf16_shards(src: Path, out: Path) -> Path:
    """`src`'s weights as bfloat16, split over two .safetensors files (as sharded checkpoints are)."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = sorted(load_file(src / "model.safetensors").items())
    out.mkdir()
    half = len(tensors) // 2
    for i, part in enumerate((tensors[:half], tensors[half:])):
        save_file({n: (t + 1).to(torch.bfloat16) for n, t in part}, out / f"model-0000{i + 1}-of-00002.safetensors")
    return out


def test_nccl_pushes_weights_into_the_running_server(fake_vllm, tmp_path, tiny_model_dir):
    from fixtures.gloo_transport import GlooTransport

    from ssrkit.train.tiny import save_tiny_model

    transport = GlooTransport()
    strategy = NCCLStrategy(transport=transport, timeout=30)
    with PolicyServer(config(tmp_path, served_model_name="policy", strategy="nccl"), strategy) as server:
        assert "--weight-transfer-config" in server.config.args and server.config.env["VLLM_SERVER_DEV_MODE"] == "1"
        server.start(tiny_model_dir)
        pid = server.process.pid
        assert fake_state(server) == {"weights": {}, "paused": False, "calls": []}

        second = save_tiny_model(tmp_path / "second", seed=1)
        expected = checkpoint_digests(second)
        assert expected != checkpoint_digests(tiny_model_dir)  # the push has something to show
        server.refresh(second)
        state = fake_state(server)
        assert state["weights"] == expected and sorted(transport.sent) == sorted(expected)
        assert state["calls"] == ["/get_world_size", "/init_weight_transfer_engine", *PUSH]
        assert not state["paused"]
        assert server.process.pid == pid and server.process.poll() is None  # pushed into the same process: no restart
        assert server.checkpoint == str(second) and server.model == "policy" and server.models() == ["policy"]

        third = bf16_shards(second, tmp_path / "third")
        server.refresh(third)
        state = fake_state(server)
        assert state["weights"] == checkpoint_digests(third)
        assert {w["dtype"] for w in state["weights"].values()} == {"bfloat16"}
        assert state["calls"] == ["/get_world_size", "/init_weight_transfer_engine", *PUSH, *PUSH]  # group kept
        assert transport.inits == 1 and server.process.pid == pid and server.checkpoint == str(third)


def test_nccl_against_a_server_without_weight_transfer_fails_fast(fake_vllm, tmp_path, tiny_model_dir):
    from fixtures.gloo_transport import GlooTransport

    with PolicyServer(config(tmp_path)) as server:  # started by the restart strategy: no dev mode, no config
        server.start(tiny_model_dir)
        strategy = NCCLStrategy(transport=GlooTransport(timeout=10), timeout=10)
        started = time.monotonic()
        with pytest.raises(ServeError) as err:
            strategy.refresh(server, str(tiny_model_dir))
        assert time.monotonic() - started < 5
        message = str(err.value)
        assert "GET /get_world_size answered 404" in message and "not started with the nccl strategy" in message
        assert "\n" not in message and strategy.group is None and server.checkpoint == str(tiny_model_dir)


def test_nccl_resumes_the_server_when_the_update_fails(fake_vllm, tmp_path, tiny_model_dir):
    from fixtures.gloo_transport import GlooTransport

    transport = GlooTransport(timeout=10)
    transport.packed = True  # announced as packed: the fake refuses to unpack, after /pause
    strategy = NCCLStrategy(transport=transport, timeout=15)
    with PolicyServer(config(tmp_path, strategy="nccl"), strategy) as server:
        server.start(tiny_model_dir)
        started = time.monotonic()
        with pytest.raises(ServeError, match=r"POST /update_weights answered 500: .*packed broadcasts"):
            server.refresh(tiny_model_dir)
        assert time.monotonic() - started < 10
        state = fake_state(server)
        assert state["calls"][-3:] == ["/start_weight_update", "/update_weights", "/resume"] and not state["paused"]
        assert strategy.group is None  # a failed transfer leaves the group unusable: the next refresh forms one


def vllm_and_cuda() -> bool:
    import importlib.util

    import torch

    return importlib.util.find_spec("vllm") is not None and torch.cuda.is_available()


def test_vllm_nccl_transport_says_what_it_needs():
    if vllm_and_cuda():
        pytest.skip("vLLM and CUDA are here: the transport would work")
    need = "the nccl strategy pushes weights from a CUDA GPU with vLLM installed on this machine; use --strategy restart"
    with pytest.raises(ServeError, match=need) as err:
        VLLMNCCLTransport()
    assert "\n" not in str(err.value)
    with pytest.raises(ServeError, match=need):  # the default transport: refused before any call to the server
        NCCLStrategy().refresh(PolicyServer(ServeConfig(port=free_port())), "ckpt")


# -- ssrkit serve --strategy / --refresh ---------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "from ssrkit.cli.serve import main; main()", *map(str, args)],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def models_at(port: int) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as response:
        return [m["id"] for m in json.loads(response.read())["data"]]


def wait_dead(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_cli_refresh_by_lora_keeps_the_process(fake_vllm, tmp_path):
    port, pid_file = free_port(), tmp_path / "vllm.pid"
    common = ["--port", port, "--pid-file", pid_file, "--log", tmp_path / "v.log", "--timeout", 20]
    proc = cli(tmp_path / "base", "--detach", "--strategy", "lora", "--served-model-name", "policy", *common)
    assert proc.returncode == 0, proc.stderr
    pid = int(pid_file.read_text())
    recorded = json.loads((tmp_path / "vllm.pid.json").read_text())
    assert recorded["strategy"] == "lora" and recorded["pid"] == pid and "--enable-lora" in recorded["args"]
    for n in (1, 2, 3):  # each refresh is a new ssrkit process: the loaded adapter comes from the record
        proc = cli(tmp_path / f"adapter-{n}", "--refresh", "--json", *common)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == {"base_url": f"http://127.0.0.1:{port}/v1", "model": f"policy-{n}",
                                           "pid": pid, "policy": None}
        assert models_at(port) == ["policy", f"policy-{n}"]
    assert alive(pid) and int(pid_file.read_text()) == pid  # hot-swapped into the same server
    assert json.loads((tmp_path / "vllm.pid.json").read_text())["checkpoint"] == str(tmp_path / "adapter-3")

    proc = cli(tmp_path / "adapter-4", "--refresh", "--strategy", "restart", *common)
    assert proc.returncode == 2 and "started with strategy 'lora', not 'restart'" in proc.stderr
    assert cli("--stop", "--pid-file", pid_file).returncode == 0
    assert wait_dead(pid) and not pid_file.exists() and not (tmp_path / "vllm.pid.json").exists()


def test_cli_refresh_by_restart_and_errors(fake_vllm, tmp_path):
    port, pid_file = free_port(), tmp_path / "vllm.pid"
    common = ["--port", port, "--pid-file", pid_file, "--log", tmp_path / "v.log", "--timeout", 20]
    assert cli(tmp_path / "ckpt-a", "--detach", *common).returncode == 0
    first = int(pid_file.read_text())
    proc = cli(tmp_path / "ckpt-b", "--refresh", *common)
    assert proc.returncode == 0, proc.stderr
    second = int(pid_file.read_text())
    assert second != first and wait_dead(first) and alive(second)
    assert models_at(port) == [str(tmp_path / "ckpt-b")]
    assert proc.stdout.strip() == f"serving {tmp_path / 'ckpt-b'} as {tmp_path / 'ckpt-b'} at " \
        f"http://127.0.0.1:{port}/v1 (pid {second})"

    os.killpg(second, 9)  # the server died behind our back
    assert wait_dead(second)
    proc = cli(tmp_path / "ckpt-c", "--refresh", *common)
    assert proc.returncode == 2
    assert proc.stderr == f"error: the server recorded in {pid_file} (process group {second}) is not running\n"
    assert cli("--stop", "--pid-file", pid_file).returncode == 0

    proc = cli(tmp_path / "ckpt", "--refresh", "--pid-file", tmp_path / "none.pid")
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: no server recorded in {tmp_path / 'none.pid'}")
    assert proc.stderr.count("\n") == 1

    proc = cli(tmp_path / "ckpt", "--detach", "--strategy", "bogus", *common)
    assert proc.returncode == 2
    assert proc.stderr == "error: unknown refresh strategy 'bogus': use one of restart, lora, nccl\n"
    assert not port_taken(port)  # nothing was started


def port_taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_cli_nccl_starts_with_weight_transfer_and_says_what_refresh_needs(fake_vllm, tmp_path, tiny_model_dir):
    port, pid_file = free_port(), tmp_path / "vllm.pid"
    common = ["--port", port, "--pid-file", pid_file, "--log", tmp_path / "v.log", "--timeout", 20]
    proc = cli(tiny_model_dir, "--detach", "--strategy", "nccl", "--served-model-name", "policy", *common)
    assert proc.returncode == 0, proc.stderr
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/get_world_size", timeout=5) as response:
            assert json.loads(response.read()) == {"world_size": 1}  # dev mode + --weight-transfer-config reached it
        if vllm_and_cuda():
            return  # a real push would be attempted here
        proc = cli(tiny_model_dir, "--refresh", *common)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1
        assert "use --strategy restart otherwise" in proc.stderr
    finally:
        cli("--stop", "--pid-file", pid_file)


def test_cli_replicas_one_server_per_gpu_on_consecutive_ports(fake_vllm, tmp_path):
    port = free_port()
    while any(socket.socket().connect_ex(("127.0.0.1", port + i)) == 0 for i in (1, 2)):
        port = free_port()
    env = {**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": "4,5,6"}
    run = [sys.executable, "-c", "from ssrkit.cli.serve import main; main()"]
    proc = subprocess.run([*run, str(tmp_path / "ckpt"), "--port", str(port), "--served-model-name", "policy",
                           "--replicas", "3", "--detach", "--json"], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    urls = [f"http://127.0.0.1:{port + i}/v1" for i in range(3)]
    assert info["base_urls"] == urls and info["base_url"] == ",".join(urls) and info["model"] == "policy"
    pids = [int((tmp_path / f"vllm-{port + i}.pid").read_text().split()[0]) for i in range(3)]
    assert all(alive(p) for p in pids)
    for i, pid in enumerate(pids):  # server i was given the i-th visible GPU
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"CUDA_VISIBLE_DEVICES={4 + i}".encode() in environ
    for u in urls:
        with urllib.request.urlopen(u + "/models", timeout=5) as r:
            assert "policy" in r.read().decode()
    proc = subprocess.run([*run, "--stop", "--replicas", "3", "--port", str(port)], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    deadline = time.monotonic() + 10
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)
    proc = subprocess.run([*run, "ckpt", "--replicas", "2", "--pid-file", "x.pid"], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "drop --pid-file" in proc.stderr


def versioned(path: Path, step: int) -> Path:
    from ssrkit.store.policy import child_version, write_version

    path.mkdir(parents=True, exist_ok=True)
    version = child_version(None, step)
    write_version(path, version)
    return path


def test_a_versioned_checkpoint_is_served_under_its_alias_and_reported(fake_vllm, tmp_path):
    from ssrkit.store.policy import alias, read_version

    ckpt = versioned(tmp_path / "ckpt", 3)
    name = alias(read_version(ckpt))
    port, pid_file = free_port(), tmp_path / "vllm.pid"
    common = ["--port", port, "--pid-file", pid_file, "--log", tmp_path / "v.log", "--timeout", 20]
    proc = cli(ckpt, "--detach", "--json", "--served-model-name", "policy", *common)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"] == {"step": 3, "id": read_version(ckpt).id}
    assert models_at(port) == ["policy", name]  # the name clients use stays first: responses and adapters use it
    assert json.loads((tmp_path / "vllm.pid.json").read_text())["policy"]["step"] == 3
    proc = cli(tmp_path / "plain", "--refresh", "--json", *common)  # restart onto an unversioned checkpoint
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"] is None and models_at(port) == ["policy"]
    assert cli("--stop", "--pid-file", pid_file).returncode == 0


def test_lora_refresh_names_adapters_by_alias_and_keeps_the_newest_two(fake_vllm, tmp_path):
    from ssrkit.store.policy import alias, read_version

    adapters = [versioned(tmp_path / f"adapter-{n}", n) for n in (1, 2, 3)]
    with PolicyServer(config(tmp_path, served_model_name="policy", strategy="lora", lora_keep=2)) as server:
        server.start(tmp_path / "base")
        for a in adapters:
            server.refresh(a)
        names = [alias(read_version(a)) for a in adapters]
        assert server.model == names[2] and server.policy.step == 3
        assert server.models() == ["policy", names[1], names[2]]


def test_nccl_never_claims_a_version(fake_vllm, tmp_path):
    ckpt = versioned(tmp_path / "ckpt", 4)
    server = PolicyServer(config(tmp_path, served_model_name="policy", strategy="nccl"))
    assert server.served_names(str(ckpt)) == ["policy"]
