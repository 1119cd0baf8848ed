"""Fixtures for the executor tests: example repositories and artifacts, a 3-node Ray cluster on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.repos import EXAMPLES
from ssrkit.examples import materialize

@pytest.fixture(scope="session")
def example_repos(tmp_path_factory) -> dict[str, Path]:
    dest = tmp_path_factory.mktemp("repos")
    return {p.name: p for p in materialize(EXAMPLES / "repos", dest)}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SSRKIT_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """Three Ray nodes on this machine (one CPU, one sandbox slot each; a small object store), shut down after."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from ssrkit.ray_executor import SLOT_RESOURCE

    # the nodes' own caches (original runs, unpacked repositories), not the user's
    old = os.environ.get("SSRKIT_CACHE")
    os.environ["SSRKIT_CACHE"] = str(tmp_path_factory.mktemp("node-cache"))
    node = dict(num_cpus=1, resources={SLOT_RESOURCE: 1}, object_store_memory=100 * 1024 * 1024)
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    workers = [cluster.add_node(**node) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    try:
        yield cluster, workers
    finally:
        ray.shutdown()
        cluster.shutdown()
        if old is None:
            os.environ.pop("SSRKIT_CACHE", None)
        else:
            os.environ["SSRKIT_CACHE"] = old
