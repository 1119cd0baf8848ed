"""Fixtures of the self-play tests: a tiny repository, and one offline round of the recipe on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
for p in (str(HERE),):
    if p not in sys.path:
        sys.path.insert(0, p)

from selfplay_testlib import OFFLINE_ARGS, make_calc_repo, run_recipe  # noqa: E402


@pytest.fixture(scope="session")
def calc_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_calc_repo(tmp_path_factory.mktemp("repos") / "calc")


@pytest.fixture(scope="session")
def offline_run(tmp_path_factory: pytest.TempPathFactory, calc_repo: Path) -> Path:
    """RUN after one offline round on the calc repository, through the recipe."""
    run = tmp_path_factory.mktemp("offline") / "run"
    run_recipe(run, [calc_repo], *OFFLINE_ARGS)
    return run
