"""The executor tests: each test has an original-run cache of its own."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SSRKIT_CACHE", str(tmp_path / "cache"))
