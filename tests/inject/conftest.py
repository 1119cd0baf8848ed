"""The inject tests run `python` in sandboxes: this interpreter, with a cache of the session's own."""

from __future__ import annotations

import os
import sys

import pytest


@pytest.fixture(scope="session", autouse=True)
def _environment(tmp_path_factory):
    """Tests run `python` in sandboxes: make it this interpreter; keep caches private."""
    old = dict(os.environ)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ["SSRKIT_CACHE"] = str(tmp_path_factory.mktemp("ssrkit-cache"))
    yield
    os.environ.clear()
    os.environ.update(old)
