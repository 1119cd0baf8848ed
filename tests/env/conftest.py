"""The env tier's tasks: the example artifacts on a materialized copy of their repository, validated once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixtures.repos import EXAMPLES, copy_artifact
from solve.conftest import SANDBOX, make_engine, validate
from ssrkit.examples import materialize
from ssrkit.store.artifact import Artifact
from ssrkit.store.source import RepoSource

SLUG = "textkit/valid-slug-truncate-off-by-one"
INVALID = "textkit/invalid-original_passes"


@pytest.fixture(scope="session")
def textkit_repo(tmp_path_factory) -> Path:
    [repo] = [p for p in materialize(EXAMPLES / "repos", tmp_path_factory.mktemp("env-repos")) if p.name == "textkit"]
    return repo


@pytest.fixture(scope="session")
def slug_validated(tmp_path_factory, textkit_repo) -> Artifact:
    """The off-by-one in textkit's slug, validated (its artifact.toml names the materialized repository)."""
    art = Artifact(copy_artifact(EXAMPLES / "artifacts" / SLUG, tmp_path_factory.mktemp("env-arts") / "slug"))
    result = validate(art, RepoSource.local(textkit_repo))
    assert result["valid"], result
    return art


@pytest.fixture
def slug(slug_validated, tmp_path) -> Artifact:
    """A private copy (attempts recorded by one test stay in it)."""
    return Artifact(shutil.copytree(slug_validated.path, tmp_path / "slug"))


@pytest.fixture
def engine():
    return make_engine()


__all__ = ["SANDBOX"]
