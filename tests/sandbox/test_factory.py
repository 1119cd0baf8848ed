"""open_sandbox, fingerprints, engine checks, output capping, the image builder and its CLI."""

from __future__ import annotations

import os
import random
import time

import pytest

from fixtures.git import git
from fixtures.repos import make_proj_repo
from ssrkit.errors import SandboxError, SsrkitError
from ssrkit.sandbox import SandboxOptions, open_sandbox
from ssrkit.sandbox.capture import OutputCapture, truncate_middle
from ssrkit.sandbox.factory import docker_available, fingerprint
from ssrkit.store.source import RepoSource


def test_output_capture_matches_truncate_middle():
    rng = random.Random(7)
    for _ in range(300):
        limit = rng.randint(2, 300)
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 900)))
        cap = OutputCapture(limit)
        i = 0
        while i < len(data):
            n = rng.randint(1, 120)
            cap.feed(data[i:i + n])
            i += n
        assert cap.result() == truncate_middle(data, limit)


def test_output_capture_memory_is_bounded():
    cap = OutputCapture(1000)
    for _ in range(10_000):
        cap.feed(b"x" * 1000)
    assert len(cap.head) + len(cap.tail) <= 1500 + 1000
    out, truncated = cap.result()
    assert truncated and len(out) < 1100


def test_fingerprint_tracks_the_repository_state(tmp_path):
    repo = make_proj_repo(tmp_path)
    src = RepoSource.local(repo)
    fp = fingerprint(src)
    assert fp == fingerprint(src)

    def changed(action) -> bool:
        nonlocal fp
        time.sleep(0.01)  # distinct mtimes
        action()
        new = fingerprint(src)
        differs = new != fp
        fp = new
        return differs

    assert changed(lambda: (repo / "src" / "pkg" / "core.py").write_text("def add(a, b):\n    return 0\n"))
    assert changed(lambda: (repo / "untracked.py").write_text("u = 1\n"))
    assert changed(lambda: (repo / "build" / "out.txt").write_text("regenerated\n"))  # inside ignored dir
    assert changed(lambda: (repo / "src" / "pkg" / "_version.py").write_text('VERSION = "2"\n'))
    assert changed(lambda: (git(repo, "add", "-A"), git(repo, "commit", "-qm", "more")))
    assert not changed(lambda: None)
    # a non-git directory has a fingerprint too
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a")
    assert fingerprint(RepoSource.local(plain)).startswith("local-")


def test_open_sandbox_rejects_mismatched_backends(shared_repo):
    with pytest.raises(SandboxError, match="unknown sandbox backend"):
        open_sandbox(RepoSource.local(shared_repo), "vm")
    with pytest.raises(SandboxError, match="needs a repository directory"):
        open_sandbox(RepoSource.from_image("x:y"), "local")
    with pytest.raises(SandboxError, match="ssrkit image build"):
        open_sandbox(RepoSource.local(shared_repo), "docker")


def test_failing_setup_raises_and_cleans_up(shared_repo, monkeypatch):
    from ssrkit.sandbox.local import pristine_cache_dir

    monkeypatch.setenv("SSRKIT_LOCAL_ISOLATION", "none")
    base = pristine_cache_dir()
    before = {p.name for p in base.iterdir() if p.name.startswith("sb-")}
    with pytest.raises(SandboxError, match=r"setup command .* failed \(exit 4\): oops"):
        open_sandbox(RepoSource.local(shared_repo), "local", SandboxOptions(setup="echo oops; exit 4"))
    assert {p.name for p in base.iterdir() if p.name.startswith("sb-")} == before  # the cache stays


def test_workspaces_share_one_pristine_cache(tmp_path, monkeypatch):
    from ssrkit.sandbox import local

    monkeypatch.setenv("SSRKIT_LOCAL_ISOLATION", "none")
    repo = make_proj_repo(tmp_path)
    sess = local._session()
    n = len(sess.caches)
    with local.LocalSandbox(repo) as a, local.LocalSandbox(repo) as b:
        assert len(sess.caches) == n + 1
        assert a.workspace != b.workspace
        a.run("echo a > README.md", timeout=30)
        assert b.read_file("README.md") != a.read_file("README.md")
    (repo / "README.md").write_text("changed by the user\n")
    with local.LocalSandbox(repo) as c:
        assert len(sess.caches) == n + 2
        assert c.read_file("README.md") == b"changed by the user\n"


def test_paths_cannot_escape_through_symlinks(shared_repo, monkeypatch):
    from ssrkit.sandbox.local import LocalSandbox

    with LocalSandbox(shared_repo, isolation="none") as sb:
        sb.run("ln -s /etc/passwd leak; ln -s /etc etcdir", timeout=30)
        with pytest.raises(SandboxError, match="outside the sandbox"):
            sb.read_file("leak")
        with pytest.raises(SandboxError, match="outside the sandbox"):
            sb.write_file("etcdir/evil", "x")


def test_docker_unreachable_message(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    why = docker_available()
    assert why and "start Docker or use --backend local" in why
    from ssrkit.sandbox.docker import DockerSandbox

    with pytest.raises(SandboxError, match="start Docker or use --backend local"):
        DockerSandbox("anything:latest")


@pytest.mark.docker
def test_docker_missing_image_message(docker_engine):
    with pytest.raises(SandboxError, match=r"not found: build it with `ssrkit image build REPO`"):
        open_sandbox(RepoSource.from_image("ssrkit-test/no-such-image:nope"), "auto")


@pytest.mark.docker
def test_docker_image_fingerprint(image_for, shared_repo):
    image = image_for(shared_repo)
    fp = fingerprint(RepoSource.from_image(image))
    assert fp.startswith("image-") and fp == fingerprint(RepoSource.from_image(image))
    assert fp != fingerprint(RepoSource.from_image(image, workdir="/elsewhere"))


@pytest.mark.docker
def test_image_cli(docker_engine, tmp_path):
    import docker
    from typer.testing import CliRunner

    from ssrkit.cli.image import image_app
    from ssrkit.sandbox.image import BASE_IMAGE

    runner = CliRunner()
    res = runner.invoke(image_app, ["build", "--help"])
    assert res.exit_code == 0 and "ssrkit image build" in res.output
    res = runner.invoke(image_app, ["base"])  # the session already has it (or builds it once)
    assert res.exit_code == 0 and BASE_IMAGE in res.stdout
    repo = make_proj_repo(tmp_path)
    tag = "ssrkit-test/cli:1"
    try:
        res = runner.invoke(image_app, ["build", str(repo), "--tag", tag, "-q"])
        assert res.exit_code == 0, res.output
        assert res.stdout.strip() == tag
        with open_sandbox(RepoSource.from_image(tag)) as sb:
            # as the user has it: ignored and untracked files, uncommitted change, history
            assert sb.read_file("src/pkg/_version.py") == b'VERSION = "1.2.3.dev0"\n'
            assert sb.read_file("notes.txt") == b"untracked notes\n"
            assert sb.run("git log --oneline | wc -l", timeout=30).output.strip() == "2"
        res = runner.invoke(image_app, ["build", str(repo), "--base", "ssrkit-test/none:0"])
        assert isinstance(res.exception, SsrkitError) and "base image" in str(res.exception)
    finally:
        try:
            docker.from_env().images.remove(tag, force=True)
        except Exception:  # noqa: BLE001
            pass


def test_apt_mirror_is_a_url():
    from ssrkit.sandbox.image import apt_mirror, default_tag

    assert apt_mirror().startswith(("http://", "https://", "file:/"))
    assert default_tag(os.getcwd()).startswith("ssrkit/")
