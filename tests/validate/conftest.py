"""Fixtures for validation tests: the example repositories, materialized once per session."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.repos import EXAMPLES
from ssrkit.examples import materialize


@pytest.fixture(scope="session")
def example_repos(tmp_path_factory) -> dict[str, Path]:
    dest = tmp_path_factory.mktemp("repos")
    return {p.name: p for p in materialize(EXAMPLES / "repos", dest)}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test gets its own original-run cache, so verdicts never come from another test."""
    monkeypatch.setenv("SSRKIT_CACHE", str(tmp_path / "cache"))
