"""Overlay workspaces (issue 15): what is in use is said, snapshots hold what changed, nothing outlives its
process. Skipped where overlay mounts do not work (the copies are then what every other test runs on)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fixtures.paths import SRC
from ssrkit.sandbox import PRISTINE, SandboxOptions, open_sandbox
from ssrkit.source import RepoSource


def overlays_work() -> bool:
    from ssrkit.sandbox._overlay import overlay_available
    from ssrkit.sandbox.local import pristine_cache_dir

    return overlay_available(str(pristine_cache_dir()))[0]


def mounts_under(path: str) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        return [line.split()[4] for line in fh if line.split()[4].startswith(path.rstrip("/") + "/")]


@pytest.fixture
def overlay(monkeypatch):
    if not overlays_work():
        pytest.skip("overlay mounts do not work here")
    monkeypatch.setenv("SSRKIT_LOCAL_WORKSPACE", "overlay")


def test_the_workspace_kind_is_reported(shared_repo, overlay, monkeypatch):
    with open_sandbox(RepoSource.local(shared_repo), "local") as sb:
        assert sb.workspace_kind == "overlay"
        assert sb.isolation["workspace"].startswith("overlay")
        assert mounts_under(sb.dir)  # the workspace is a mount
        d = sb.dir
    assert not mounts_under(d) and not os.path.exists(d)
    monkeypatch.setenv("SSRKIT_LOCAL_WORKSPACE", "copy")
    with open_sandbox(RepoSource.local(shared_repo), "local") as sb:
        assert sb.workspace_kind == "copy"
        assert sb.isolation["workspace"].startswith("copy") and "SSRKIT_LOCAL_WORKSPACE=copy" in sb.isolation["workspace"]
        assert not mounts_under(sb.dir)


def test_a_bad_workspace_setting_is_an_error(shared_repo, monkeypatch):
    from ssrkit.errors import SandboxError

    monkeypatch.setenv("SSRKIT_LOCAL_WORKSPACE", "tmpfs")
    with pytest.raises(SandboxError, match="SSRKIT_LOCAL_WORKSPACE"):
        open_sandbox(RepoSource.local(shared_repo), "local")


def test_a_snapshot_holds_only_what_changed(shared_repo, overlay):
    with open_sandbox(RepoSource.local(shared_repo), "local") as sb:
        sb.run("echo more >> README.md && rm notes.txt && mv src/pkg src/pkg2", timeout=60)
        sb.snapshot("changed")
        layer = sb._snapshots["changed"]
        held = sorted(os.path.relpath(os.path.join(d, f), layer.path) for d, ds, fs in os.walk(layer.path)
                      for f in fs + [x for x in ds if not os.listdir(os.path.join(d, x))])
        assert "README.md" in held and "notes.txt" in held  # the change and the deletion's whiteout
        assert not any(h.startswith(".git/") for h in held)  # nothing unchanged is copied
        sb.reset(PRISTINE)
        assert sb.run("test -d src/pkg && test -f notes.txt && ! test -e src/pkg2", timeout=60).ok
        sb.reset("changed")
        assert sb.run("test -d src/pkg2/ && ! test -e src/pkg && ! test -e notes.txt && tail -1 README.md",
                      timeout=60).output.strip() == "more"
        # a snapshot on top of a snapshot, then back down
        sb.run("rm -rf src/pkg2 && mkdir src/pkg2 && echo new > src/pkg2/only.py", timeout=60)
        sb.snapshot("second")
        sb.reset("changed")
        assert sb.run("test -f src/pkg2/core.py && ! test -e src/pkg2/only.py", timeout=60).ok
        sb.reset("second")
        assert sb.run("ls src/pkg2", timeout=60).output.split() == ["only.py"]


_CHILD = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, {src!r})
    from ssrkit.sandbox import open_sandbox
    from ssrkit.source import RepoSource
    sb = open_sandbox(RepoSource.local({repo!r}), "local")
    print(os.path.dirname(sb.dir), flush=True)
    os.kill(os.getpid(), 9)
""")


def test_mounts_of_a_killed_process_are_swept(shared_repo, overlay):
    """SIGKILL runs no cleanup: the next ssrkit process unmounts and removes what it left."""
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(src=str(SRC), repo=str(shared_repo))],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SSRKIT_LOCAL_WORKSPACE": "overlay"})
    assert proc.returncode == -signal.SIGKILL
    left = proc.stdout.strip()
    assert left and mounts_under(left)
    from ssrkit.sandbox.local import _sweep_stale_dirs

    _sweep_stale_dirs(os.path.dirname(left))
    assert not mounts_under(left)
    assert not os.path.exists(left)


def test_setup_changes_are_part_of_pristine(shared_repo, overlay):
    opts = SandboxOptions(setup="echo built > build/setup.txt && chmod 700 .")
    with open_sandbox(RepoSource.local(shared_repo), "local", opts) as sb:
        sb.run("rm build/setup.txt && chmod 755 .", timeout=60)
        sb.reset(PRISTINE)
        res = sb.run("cat build/setup.txt; stat -c %a .", timeout=60)
        assert res.output.split() == ["built", "700"]
