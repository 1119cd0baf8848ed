"""A real multi-node Ray cluster on this machine, for the `--executor ray` tests (skipped without ray)."""

from __future__ import annotations

import os

import pytest


def node_args() -> dict:
    """One small node: one CPU, one sandbox slot, a 100 MB object store."""
    from ssrkit.ray_executor import SLOT_RESOURCE

    return dict(num_cpus=1, resources={SLOT_RESOURCE: 1}, object_store_memory=100 * 1024 * 1024)


def local_ray_cluster(tmp_path_factory):
    """Three Ray nodes on this machine (one CPU, one sandbox slot each; a small object store), shut down after."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # the nodes' own caches (original runs, unpacked repositories), not the user's
    old = os.environ.get("SSRKIT_CACHE")
    os.environ["SSRKIT_CACHE"] = str(tmp_path_factory.mktemp("node-cache"))
    node = node_args()
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
