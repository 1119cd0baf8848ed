"""Code under test is the workspace's; bulky ignored dirs; cleanup on signals; fallback warning."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
import venv
from pathlib import Path

import pytest

from fixtures.git import git
from fixtures.paths import SRC
from fixtures.sandboxes import BACKENDS


@pytest.fixture(scope="session")
def editable(tmp_path_factory):
    """A tiny package repository installed in editable mode (from its original path) into a venv."""
    root = tmp_path_factory.mktemp("editable")
    repo = root / "tinyrepo"
    (repo / "src" / "tinypkg").mkdir(parents=True)
    (repo / "src" / "tinypkg" / "__init__.py").write_text('VALUE = "original"\n')
    (repo / "setup.py").write_text(
        'from setuptools import setup\n'
        'setup(name="tinypkg", version="0.1", package_dir={"": "src"}, packages=["tinypkg"])\n')
    (repo / ".gitignore").write_text("*.egg-info/\nbuild/\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    env_dir = root / "venv"
    # offline: pip and setuptools come from the base interpreter, no build isolation. PEP 660 editable
    # installs need the `wheel` package; where it is missing, `setup.py develop` makes the same kind of
    # install (a .pth entry pointing at the original source directory).
    venv.EnvBuilder(with_pip=False, system_site_packages=True).create(env_dir)
    py = env_dir / "bin" / "python"
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                           "--no-index", "-e", str(repo)], capture_output=True, text=True)
    if proc.returncode != 0:
        proc = subprocess.run([str(py), "setup.py", "-q", "develop", "--no-deps"], cwd=repo,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot make an editable install here: {proc.stderr.strip()[-300:]}")
    out = subprocess.run([str(py), "-c", "import tinypkg; print(tinypkg.VALUE)"], capture_output=True,
                         text=True, cwd="/").stdout.strip()
    assert out == "original"
    return repo, env_dir


@pytest.mark.parametrize("opener", BACKENDS, indirect=True)
def test_editable_install_does_not_shadow_the_workspace(opener, editable):
    repo, env_dir = editable
    if opener.backend == "docker":
        sb = opener(repo)  # the image installs the repository in editable mode at /testbed
        python = "python3"
    else:
        # the user's virtualenv is active (PATH/VIRTUAL_ENV), as when running ssrkit from it
        sb = opener(repo, env={"PATH": f"{env_dir}/bin:{os.environ['PATH']}", "VIRTUAL_ENV": str(env_dir)})
        python = "python"
    sb.write_file("src/tinypkg/__init__.py", 'VALUE = "workspace"\n')
    probe = f"{python} -c 'import tinypkg; print(tinypkg.VALUE)'"
    # from the repository root and from elsewhere (no help from the current directory)
    assert sb.run(probe, timeout=60).output.strip() == "workspace"
    assert sb.run(probe, timeout=60, cwd=sb.scratch).output.strip() == "workspace"
    if opener.backend == "local-none":
        # control: without the PYTHONPATH ssrkit sets, the editable install would shadow the workspace
        assert sb.run(f"env -u PYTHONPATH {probe}", timeout=60, cwd=sb.scratch).output.strip() == "original"
    assert (repo / "src" / "tinypkg" / "__init__.py").read_text() == 'VALUE = "original"\n'


@pytest.fixture
def repo_with_venv(tmp_path):
    repo = tmp_path / "withvenv"
    repo.mkdir()
    (repo / "code.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text(".venv/\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    v = repo / ".venv"
    (v / "lib").mkdir(parents=True)
    (v / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (v / "lib" / "big.bin").write_bytes(b"\0" * 1_000_000)
    return repo


def test_ignored_virtualenv_is_mounted_not_copied(repo_with_venv):
    from ssrkit.sandbox.local import LocalSandbox, isolation_available

    if isolation_available():
        pytest.skip(f"needs bubblewrap: {isolation_available()}")
    with LocalSandbox(repo_with_venv, isolation="bwrap") as sb:
        assert sb.skipped == [".venv"]
        assert not os.path.exists(os.path.join(sb.workspace, ".venv", "lib"))  # not copied
        res = sb.run("wc -c < .venv/lib/big.bin; touch .venv/new 2>&1 || echo read-only", timeout=30)
        assert res.output.split() [0] == "1000000"  # the commands see it, at the same place ...
        assert "read-only" in res.output  # ... read-only
        assert "??" not in sb.run("git status --porcelain", timeout=30).output
    with LocalSandbox(repo_with_venv, isolation="none") as sb:  # without bubblewrap: a plain copy
        assert sb.skipped == []
        assert os.path.getsize(os.path.join(sb.workspace, ".venv", "lib", "big.bin")) == 1_000_000


def test_fallback_without_bwrap_warns_once(shared_repo, monkeypatch, caplog):
    from ssrkit.sandbox import local

    monkeypatch.setattr(local, "_probe_result", (None, "bwrap is not installed (test)"))
    monkeypatch.setattr(local, "_warned", set())
    monkeypatch.delenv("SSRKIT_LOCAL_ISOLATION", raising=False)
    with caplog.at_level(logging.WARNING, logger="ssrkit.sandbox"):
        a = local.LocalSandbox(shared_repo)
        b = local.LocalSandbox(shared_repo)
    try:
        warnings = [r for r in caplog.records if "bwrap is not installed (test)" in r.getMessage()]
        assert len(warnings) == 1
        assert not a.isolated and a.root == a.workspace
        pp = a.run("echo $PYTHONPATH", timeout=30).output.strip().split(":")
        assert pp[:2] == [a.workspace, f"{a.workspace}/src"]
        with pytest.raises(Exception, match="bubblewrap isolation requested"):
            local.LocalSandbox(shared_repo, isolation="bwrap")
    finally:
        a.close()
        b.close()


_CHILD = textwrap.dedent("""\
    import sys, time
    sys.path.insert(0, {src!r})
    from ssrkit.sandbox import open_sandbox, SandboxOptions
    from ssrkit.store.source import RepoSource
    src = RepoSource.{ctor}
    sb = open_sandbox(src, {backend!r}, SandboxOptions())
    print("DIR", getattr(sb, "dir", ""), "CONTAINER", getattr(getattr(sb, "container", None), "name", ""),
          flush=True)
    sb.run("sleep {tok}", timeout=120)
""")


def _interrupt(child_code: str, sig: int) -> tuple[str, str]:
    # SIGINT as a terminal's Ctrl-C finds it, even where the suite inherited it ignored (started in the
    # background of a shell without job control; Python keeps an ignored SIGINT ignored)
    proc = subprocess.Popen([sys.executable, "-c", child_code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    line = proc.stdout.readline()
    assert line.startswith("DIR"), proc.stderr.read()
    time.sleep(1.0)  # the command is running
    proc.send_signal(sig)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    parts = line.split()
    return (parts[1] if len(parts) > 1 and parts[1] != "CONTAINER" else ""), parts[-1]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_local_cleanup_on_signal(shared_repo, sig):
    tok = f"{os.getpid() % 1000}.{int(time.time() * 1000) % 10**6}"
    code = _CHILD.format(src=str(SRC), ctor=f"local({str(shared_repo)!r})", backend="local", tok=tok)
    d, _ = _interrupt(code, sig)
    assert d and not os.path.exists(d)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"sleep {tok}" not in ps


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_docker_cleanup_on_signal(shared_repo, image_for, sig):
    import docker

    image = image_for(shared_repo)
    code = _CHILD.format(src=str(SRC), ctor=f"from_image({image!r})", backend="docker", tok="3000.5")
    _, name = _interrupt(code, sig)
    assert name
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get(name)


def test_hidden_paths_are_invisible_with_bwrap(shared_repo):
    import shutil
    import tempfile

    from ssrkit.sandbox import SandboxOptions
    from ssrkit.sandbox.local import LocalSandbox, isolation_available

    if isolation_available():
        pytest.skip(f"needs bubblewrap: {isolation_available()}")
    # not under /tmp, which is private in the sandbox anyway
    tmp_path = Path(tempfile.mkdtemp(prefix="ssrkit-hide-", dir="/var/tmp"))
    try:
        _check_hidden(shared_repo, tmp_path, SandboxOptions, LocalSandbox)
    finally:
        shutil.rmtree(tmp_path)


def _check_hidden(shared_repo, tmp_path, SandboxOptions, LocalSandbox):
    secret_dir = tmp_path / "artifact"
    secret_dir.mkdir()
    (secret_dir / "bug_inject.diff").write_text("the answer\n")
    secret_file = tmp_path / "answer.txt"
    secret_file.write_text("the answer\n")
    probe = f"ls -A {secret_dir}; cat {secret_file}; grep -c {tmp_path.name} /proc/self/mountinfo; echo end"
    # outside the toolchain nothing of the host is there at all, and the mount table names no such path
    with LocalSandbox(shared_repo, isolation="bwrap") as sb:
        out = sb.run(probe, timeout=30).output
        assert "the answer" not in out and "\n0\nend" in out, out
    # a directory on PYTHONPATH is mounted (toolchain): there, hidden paths are covered
    env = {"PYTHONPATH": str(tmp_path)}
    with LocalSandbox(shared_repo, SandboxOptions(env=env), isolation="bwrap") as sb:  # control: visible
        assert sb.run(probe, timeout=30).output.count("the answer") == 1
    opts = SandboxOptions(env=env, hide=[str(secret_dir), str(secret_file), str(shared_repo)])
    with LocalSandbox(shared_repo, opts, isolation="bwrap") as sb:
        res = sb.run(probe, timeout=30)
        assert "the answer" not in res.output and "bug_inject" not in res.output
        # the repository itself is never hidden
        assert sb.run("cat notes.txt", timeout=30).output == "untracked notes\n"


_FORK = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, {src!r})
    from ssrkit.sandbox.local import LocalSandbox
    sb = LocalSandbox({repo!r}, isolation="none")
    pid = os.fork()
    if pid == 0:
        sys.exit(0)  # a normal exit: the child runs the atexit handlers it inherited
    os.waitpid(pid, 0)
    print(os.path.isdir(sb.dir), sb.run("echo ok", timeout=30).output.strip())
    sb.close()
""")


def test_forked_child_exit_does_not_close_parent_sandboxes(shared_repo):
    code = _FORK.format(src=str(SRC), repo=str(shared_repo))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "ok"], out.stderr


def test_the_repository_copy_keeps_modes_links_and_times(tmp_path):
    """The RAM copy a workspace stands on (`prepare_copy`, a tar pipe): exact where a repository needs it."""
    from ssrkit.sandbox._tree import prepare_copy

    src = tmp_path / "repo"
    (src / "pkg" / "ro").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("a\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o750)
    os.link(src / "pkg" / "a.py", src / "pkg" / "same.py")
    os.symlink("pkg/a.py", src / "link.py")
    os.symlink("missing", src / "dangling")
    (src / "-rf").write_text("a name like an option\n")
    (src / "pkg" / "ro" / "x.txt").write_text("x\n")
    os.chmod(src / "pkg" / "ro", 0o555)
    (src / ".venv").mkdir()
    (src / ".venv" / "big").write_text("skipped\n")
    os.utime(src / "pkg" / "a.py", ns=(1_000_000_000, 1_234_567_891_000))
    os.chmod(src, 0o751)
    for skip in ([], [".venv"]):
        dest = tmp_path / f"copy{len(skip)}"
        prepare_copy(str(src), str(dest), skip)
        assert (dest / "run.sh").stat().st_mode & 0o777 == 0o750
        assert os.stat(dest).st_mode & 0o777 == 0o751
        assert (dest / "pkg" / "ro").stat().st_mode & 0o777 == 0o555 and (dest / "pkg" / "ro" / "x.txt").exists()
        assert (dest / "pkg" / "a.py").stat().st_ino == (dest / "pkg" / "same.py").stat().st_ino
        assert (dest / "pkg" / "a.py").stat().st_mtime_ns == 1_234_567_891_000
        assert os.readlink(dest / "link.py") == "pkg/a.py" and os.readlink(dest / "dangling") == "missing"
        assert (dest / "-rf").read_text() == "a name like an option\n"
        assert (dest / ".venv" / "big").exists() != bool(skip)
        os.chmod(dest / "pkg" / "ro", 0o755)
    os.chmod(src / "pkg" / "ro", 0o755)


def test_a_repository_that_cannot_be_copied_is_a_clear_error(tmp_path):
    from ssrkit.errors import SandboxError
    from ssrkit.sandbox._tree import prepare_copy

    with pytest.raises(SandboxError, match="could not copy"):
        prepare_copy(str(tmp_path / "nowhere"), str(tmp_path / "dest"), [])
