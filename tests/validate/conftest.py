"""The validation tests: each test has an original-run cache of its own."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """Each test gets its own original-run cache, so verdicts never come from another test."""
    monkeypatch.setenv("SSRKIT_CACHE", str(tmp_path / "cache"))
