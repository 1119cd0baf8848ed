"""Where ssrkit keeps what it can compute again: `$SSRKIT_CACHE`, else `$XDG_CACHE_HOME/ssrkit`
(`~/.cache/ssrkit`). Every entry is keyed by content, so a cache may be shared by runs and deleted at any time.

    CACHE/
      original-runs/   ORIGINAL_RUNS  test runs of original code, by repository state + script + parser (validate)
      testmaps/        TESTMAPS       which tests cover which lines, by repository state (inject, repair)
      repos/           NODE_REPOS     repositories unpacked on a cluster node, by digest (executor)
"""

from __future__ import annotations

import os
from pathlib import Path

ORIGINAL_RUNS = "original-runs"
TESTMAPS = "testmaps"
NODE_REPOS = "repos"


def cache_root() -> Path:
    """The cache directory, read from the environment at each call (a test or a node may set it)."""
    base = os.environ.get("SSRKIT_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ssrkit")
    return Path(base)


def original_runs_dir() -> Path:
    return cache_root() / ORIGINAL_RUNS


def testmaps_dir() -> Path:
    return cache_root() / TESTMAPS


def node_repos_dir() -> Path:
    return cache_root() / NODE_REPOS
