"""The env tier's tasks: the example artifacts on a materialized copy of their repository, validated once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fixtures.repos import EXAMPLES, copy_artifact
from fixtures.env_tier import SLUG, TIE, EnvServer
from fixtures.solving import SANDBOX, make_engine, validate
from ssrkit.examples import materialize
from ssrkit.store.artifact import Artifact
from ssrkit.store.source import RepoSource


@pytest.fixture(scope="session")
def textkit_repo(tmp_path_factory) -> Path:
    [repo] = [p for p in materialize(EXAMPLES / "repos", tmp_path_factory.mktemp("env-repos")) if p.name == "textkit"]
    return repo


def _validated(tmp_path_factory, repo: Path, rel: str, name: str) -> Artifact:
    art = Artifact(copy_artifact(EXAMPLES / "artifacts" / rel, tmp_path_factory.mktemp("env-arts") / name))
    result = validate(art, RepoSource.local(repo))
    assert result["valid"], result
    return art


@pytest.fixture(scope="session")
def slug_validated(tmp_path_factory, textkit_repo) -> Artifact:
    """The off-by-one in textkit's slug, validated (its artifact.toml names the materialized repository)."""
    return _validated(tmp_path_factory, textkit_repo, SLUG, "slug")


@pytest.fixture(scope="session")
def tie_validated(tmp_path_factory, textkit_repo) -> Artifact:
    return _validated(tmp_path_factory, textkit_repo, TIE, "tie")


@pytest.fixture
def slug(slug_validated, tmp_path) -> Artifact:
    """A private copy (attempts recorded by one test stay in it)."""
    return Artifact(shutil.copytree(slug_validated.path, tmp_path / "slug"))


@pytest.fixture
def engine():
    return make_engine()


@pytest.fixture(scope="session")
def server_config(tmp_path_factory) -> Path:
    """The sandbox's PATH: `python` in the example artifacts' test scripts is this interpreter (it has pytest)."""
    p = tmp_path_factory.mktemp("env-config") / "ssrkit.toml"
    p.write_text(f'[sandbox]\nenv = {{ PATH = "{SANDBOX.env["PATH"]}" }}\n\n[validate]\ntimeout = 60\n')
    return p


@pytest.fixture(scope="session")
def env_server(slug_validated, textkit_repo, server_config, tmp_path_factory):
    srv = EnvServer([str(slug_validated.path), "--repo", str(textkit_repo), "--config", str(server_config),
                     "--max-sessions", "4", "--idle-timeout", "30", "--record"],
                    cwd=tmp_path_factory.mktemp("env-cwd"), env={"OPENAI_API_KEY": "sk-env-secret-never-seen"})
    yield srv
    srv.stop()
