"""The fixtures every test folder may use: the session's environment (this interpreter first on PATH, an
ssrkit cache of its own), the shared repositories (built once per session, read only), the example
repositories, the agent tests' sandbox and scripted servers, the tiny model.

Helpers live in modules of tests/fixtures/ (`from fixtures.git import git`), never in a conftest: a test
module imports no conftest. Plugins: fixtures/sandboxes.py (the sandbox backends, `opener`),
fixtures/solving.py (an engine, the validated artifacts) and fixtures/xdist_groups.py (`xdist_group` marks honoured).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from fixtures import repos
from fixtures.recipe import OFFLINE_ARGS, PROFILE, run_recipe
from fixtures.scripted_server import ScriptedServer

pytest_plugins = ["fixtures.sandboxes", "fixtures.solving", "fixtures.xdist_groups"]


def pytest_configure(config: pytest.Config) -> None:
    """ssrkit's output is as wide as the process's own, in a test as for a user under make: no COLUMNS or LINES
    from the test runner. xdist's workers have COLUMNS=80 and LINES=24, which a serial run has not: every
    subprocess then wrapped its one-line messages at 80 columns, and so did `main` run in the test's process
    (ssrkit.cli.common sizes its consoles when first imported, at collection). A test about the width sets it."""
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


@pytest.fixture(scope="session", autouse=True)
def _environment(tmp_path_factory: pytest.TempPathFactory):
    """Sandboxed commands run `python`: this interpreter (it has pytest and coverage). ssrkit's cache (original
    runs, test maps, unpacked repositories) is the session's own, never the user's ~/.cache/ssrkit, which other
    runs share: a test run reads nothing it did not make. Entries are keyed by content, so tests that make the
    same repository state reuse one original run, as ssrkit itself would (tests about the cache take
    `private_cache`). Under xdist every worker is a session of its own."""
    old = dict(os.environ)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ["SSRKIT_CACHE"] = str(tmp_path_factory.mktemp("ssrkit-cache"))
    yield
    os.environ.clear()
    os.environ.update(old)


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An ssrkit cache of the test's own: what it validates was never run before, by any test."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("SSRKIT_CACHE", str(cache))
    return cache


# -- repositories: one builder each in fixtures/repos.py; tests copy them before changing anything --------------

@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """calc.py and seven passing pytest tests, in two commits (the agent tests)."""
    return repos.make_calc_repo(tmp_path_factory.mktemp("tiny") / "repo")


@pytest.fixture(scope="session")
def calc_profile_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny calc repository with the self-play tests' ssrkit.toml profile."""
    return repos.make_calc_repo(tmp_path_factory.mktemp("repos") / "calc", profile=PROFILE)


@pytest.fixture(scope="session")
def calc_pkg_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The calc package of the grading tests (fixtures.calc_pkg)."""
    return repos.make_calc_pkg_repo(tmp_path_factory.mktemp("repos") / "calc")


@pytest.fixture(scope="session")
def calc_history_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The inject tests' calc package: commit 2 fixes clamp and adds its regression test."""
    return repos.make_history_calc_repo(tmp_path_factory.mktemp("calc"))


@pytest.fixture(scope="session")
def units_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A unittest repository (TestCase classes only, tests/ is a package)."""
    return repos.make_units_repo(tmp_path_factory.mktemp("units"))


@pytest.fixture(scope="session")
def shared_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sandbox tests' project with uncommitted, untracked and ignored files (fixtures.repos.make_proj_repo)."""
    return repos.make_proj_repo(tmp_path_factory.mktemp("shared"))


@pytest.fixture(scope="session")
def small_calc_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """add and neg with seven tests (the hostile validation tests)."""
    return repos.make_small_calc_repo(tmp_path_factory.mktemp("calc") / "calc")


@pytest.fixture(scope="session")
def example_repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """examples/repos materialized once per session (name -> repository)."""
    return repos.materialize_examples(tmp_path_factory.mktemp("repos"))


# -- the agent tests: a subprocess sandbox on the tiny repository, scripted model servers ------------------------

@pytest.fixture
def sandbox(tiny_repo: Path, tmp_path: Path):
    from fixtures.subprocess_sandbox import SubprocessSandbox

    sb = SubprocessSandbox(tiny_repo, tmp_path / "sandbox")
    yield sb
    sb.close()


@pytest.fixture
def serve():
    """`serve(script, **kw)` starts a ScriptedServer that is stopped after the test."""
    servers: list[ScriptedServer] = []

    def start(script: Any, **kw: Any) -> ScriptedServer:
        server = ScriptedServer(script, **kw).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


#: fixture -> the xdist group of every test that uses it. `ray_cluster`: one Ray cluster on this machine at a time (a
#: test that starts Ray otherwise is marked `xdist_group("ray")` in its module). `offline_run` (tests/selfplay, runs): a
#: recipe round, made once per session, so once per worker: on one worker it is made once in the whole run.
FIXTURE_GROUPS = {"ray_cluster": "ray", "offline_run": "offline-run"}


@pytest.hookimpl(tryfirst=True)  # before xdist's worker reads the groups (`--dist loadgroup`)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests on a fixture of FIXTURE_GROUPS run on one xdist worker; fixtures/xdist_groups.py tells xdist."""
    for item in items:
        for fixture, group in FIXTURE_GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()) and not item.get_closest_marker("xdist_group"):
                item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def offline_run(tmp_path_factory: pytest.TempPathFactory, calc_profile_repo: Path) -> Path:
    """RUN after one offline round on the calc repository, through the recipe (tests/selfplay, tests/runs)."""
    run = tmp_path_factory.mktemp("offline") / "run"
    run_recipe(run, [calc_profile_repo], *OFFLINE_ARGS)
    return run


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    """Three Ray nodes on this machine (fixtures.raycluster), for the tests of one module."""
    from fixtures.raycluster import local_ray_cluster

    yield from local_ray_cluster(tmp_path_factory)


# -- training: a tiny model on disk ------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ssrkit.train.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_tok(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)
