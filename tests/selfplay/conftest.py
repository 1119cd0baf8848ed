"""Fixtures of the self-play tests: one offline round of the recipe on the calc repository."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.recipe import OFFLINE_ARGS, run_recipe


@pytest.fixture(scope="session")
def offline_run(tmp_path_factory: pytest.TempPathFactory, calc_profile_repo: Path) -> Path:
    """RUN after one offline round on the calc repository, through the recipe."""
    run = tmp_path_factory.mktemp("offline") / "run"
    run_recipe(run, [calc_profile_repo], *OFFLINE_ARGS)
    return run
