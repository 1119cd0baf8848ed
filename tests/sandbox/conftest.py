"""Fixtures for the sandbox suite: throwaway repositories, and one sandbox factory per backend.

Backends: `local-bwrap` (bubblewrap isolation; skipped when bwrap does not work here), `local-none` (plain
subprocesses, forced with SSRKIT_LOCAL_ISOLATION=none), `local-copy` (bubblewrap with workspaces as copies,
SSRKIT_LOCAL_WORKSPACE=copy; skipped where overlay workspaces do not work, since local-bwrap then runs on
copies already) and `docker` (marked `docker`; skipped, with the
reason, when no Docker engine answers). The docker backend runs an image built from the same repository
on top of ssrkit/base:bookworm, which is built first when missing (debootstrap, about a minute, cached).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from fixtures.repos import git
from ssrkit.sandbox import Limits, SandboxOptions, open_sandbox
from ssrkit.source import RepoSource

BACKENDS = [
    pytest.param("local-bwrap", id="local-bwrap"),
    pytest.param("local-none", id="local-none"),
    pytest.param("local-copy", id="local-copy"),  # bubblewrap, workspaces as copies (where overlays work too)
    pytest.param("docker", id="docker", marks=pytest.mark.docker),
]


def make_repo(root: Path) -> Path:
    """A small Python project as a user has it: committed code and tests, an uncommitted change, an
    untracked file, and git-ignored generated files (`_version.py`, `build/`)."""
    repo = root / "proj"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "src" / "pkg" / "__init__.py").write_text("from ._version import VERSION\n")
    (repo / "src" / "pkg" / "core.py").write_text(textwrap.dedent("""\
        def add(a, b):
            return a + b


        def sub(a, b):
            return a - b
        """))
    (repo / "tests" / "test_core.py").write_text(textwrap.dedent("""\
        from pkg.core import add, sub

        def test_add():
            assert add(1, 2) == 3

        def test_sub():
            assert sub(3, 2) == 1
        """))
    (repo / "README.md").write_text("# proj\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(repo / "run.sh", 0o755)
    (repo / ".gitignore").write_text("build/\nsrc/pkg/_version.py\n*.log\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    (repo / "src" / "pkg" / "core.py").write_text((repo / "src" / "pkg" / "core.py").read_text()
                                                  + "\n\ndef mul(a, b):\n    return a * b\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "add mul")
    # the state beyond the commit
    (repo / "README.md").write_text("# proj\n\nuncommitted line\n")
    (repo / "notes.txt").write_text("untracked notes\n")
    (repo / "src" / "pkg" / "_version.py").write_text('VERSION = "1.2.3.dev0"\n')
    (repo / "build").mkdir()
    (repo / "build" / "out.txt").write_text("generated\n")
    return repo


@pytest.fixture(scope="session")
def shared_repo(tmp_path_factory) -> Path:
    return make_repo(tmp_path_factory.mktemp("shared"))


@pytest.fixture(scope="session")
def docker_engine():
    from ssrkit.sandbox.factory import docker_available

    why = docker_available()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    return True


@pytest.fixture(scope="session")
def image_for(docker_engine, tmp_path_factory):
    """Build (once per repository path) an image of a local repository; return its name."""
    from ssrkit.image import build_image

    built: dict[str, str] = {}

    def build(repo: Path) -> str:
        key = str(repo)
        if key not in built:
            tag = f"ssrkit-test/{repo.name.lower()}:{abs(hash(key)) % 10**8}"
            built[key] = build_image(repo, tag=tag)
        return built[key]

    yield build
    import docker

    c = docker.from_env()
    for tag in built.values():
        try:
            c.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001
            pass


@pytest.fixture
def opener(request, monkeypatch):
    """open(repo, **limits) -> sandbox with a pristine snapshot, on the parametrized backend; all closed after."""
    backend = request.param
    opened = []
    if backend.startswith("local"):
        iso = backend.split("-", 1)[1]
        if iso == "copy":
            from ssrkit.sandbox._overlay import overlay_available
            from ssrkit.sandbox.local import pristine_cache_dir

            if not overlay_available(str(pristine_cache_dir()))[0]:
                pytest.skip("overlays do not work here: local-bwrap already runs on copies")
            monkeypatch.setenv("SSRKIT_LOCAL_WORKSPACE", "copy")
            iso = "bwrap"
        if iso == "bwrap":
            from ssrkit.sandbox.local import isolation_available

            why = isolation_available()
            if why:
                pytest.skip(f"bubblewrap unusable: {why}")
        monkeypatch.setenv("SSRKIT_LOCAL_ISOLATION", iso)
        image_for = None
    else:
        image_for = request.getfixturevalue("image_for")

    def open_(repo: Path, *, env: dict | None = None, setup: str | None = None, **limits):
        lim = Limits(**{"memory_mb": 1024, "pids": 128, "output_bytes": 1 << 20, **limits})
        opts = SandboxOptions(limits=lim, env=env or {}, setup=setup)
        if image_for is None:
            src = RepoSource.local(repo)
            sb = open_sandbox(src, "local", opts)
        else:
            src = RepoSource.from_image(image_for(repo))
            sb = open_sandbox(src, "docker", opts)
        opened.append(sb)
        return sb

    open_.backend = backend
    yield open_
    for sb in opened:
        sb.close()


def pytest_generate_tests(metafunc):
    if "opener" in metafunc.fixturenames and not any(
            m.name == "parametrize" and "opener" in m.args[0] for m in metafunc.definition.iter_markers()):
        metafunc.parametrize("opener", BACKENDS, indirect=True)
