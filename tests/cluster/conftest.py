"""Fixtures for the executor tests: example repositories and artifacts, a 3-node Ray cluster on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.raycluster import local_ray_cluster
from fixtures.repos import EXAMPLES
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
    yield from local_ray_cluster(tmp_path_factory)
