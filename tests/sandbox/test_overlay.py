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
from ssrkit.store.source import RepoSource


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
    import json, os, sys, threading, time
    sys.path.insert(0, {src!r})
    from ssrkit.sandbox import open_sandbox
    from ssrkit.sandbox.local import _session
    from ssrkit.store.source import RepoSource
    sb = open_sandbox(RepoSource.local({repo!r}), "local")
    threading.Thread(target=sb.run, args=("sleep 97",), kwargs={{"timeout": 300}}, daemon=True).start()
    if {kill_guardian!r}:  # as when the whole process tree is killed at once (a cgroup-wide kill)
        os.kill(_session().guardian, 9)
    time.sleep(1)
    print(json.dumps({{"base": os.path.dirname(sb.dir), "cgroups": sb.cgroup.paths if sb.cgroup else []}}), flush=True)
    os.kill(os.getpid(), 9)
""")


def killed_child(repo, kill_guardian=False) -> dict:
    """What a process that opened a sandbox and ran a command held when it was killed with SIGKILL."""
    import json

    proc = subprocess.run([sys.executable, "-c", _CHILD.format(src=str(SRC), repo=str(repo), kill_guardian=kill_guardian)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SSRKIT_LOCAL_WORKSPACE": "overlay"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return json.loads(proc.stdout)


def left_of(held: dict) -> list[str]:
    """What is left of it: mounts, its temp root, cgroups, the command's process."""
    out = [f"mount {m}" for m in mounts_under(held["base"])]
    out += ["temp root"] if os.path.exists(held["base"]) else []
    out += [f"cgroup {c}" for c in held["cgroups"] if os.path.exists(c)]
    ps = subprocess.run(["pgrep", "-f", "^sleep 97$"], capture_output=True, text=True).stdout.split()
    return out + [f"process {p}" for p in ps if _environ_has(p, held["base"])]


def _environ_has(pid: str, text: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return text.encode() in fh.read()
    except OSError:
        return False


def test_what_a_killed_process_held_dies_with_it(shared_repo, overlay):
    """SIGKILL runs no cleanup: its guardian (`_guardian.py`) removes the mounts, cgroups and RAM copies at
    once, not the next ssrkit process whenever it comes (issue 30; `benchmarks/crash_cleanup.py` runs this
    under load, ten times)."""
    import time

    held = killed_child(shared_repo)
    assert held["cgroups"] or not os.path.isdir("/sys/fs/cgroup")
    deadline = time.monotonic() + 30  # a loaded machine: the guardian must be scheduled
    while left_of(held) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left_of(held)


def test_mounts_of_a_killed_process_are_swept(shared_repo, overlay):
    """Its guardian killed too: the next ssrkit process unmounts and removes what it left."""
    held = killed_child(shared_repo, kill_guardian=True)
    left = held["base"]
    assert left and mounts_under(left)
    from ssrkit.sandbox.local import _sweep_stale_dirs

    _sweep_stale_dirs(os.path.dirname(left))
    assert not mounts_under(left)
    assert not os.path.exists(left)
    from ssrkit.sandbox._cgroup import sweep_stale

    sweep_stale()
    assert not left_of(held)


def test_setup_changes_are_part_of_pristine(shared_repo, overlay):
    opts = SandboxOptions(setup="echo built > build/setup.txt && chmod 700 .")
    with open_sandbox(RepoSource.local(shared_repo), "local", opts) as sb:
        sb.run("rm build/setup.txt && chmod 755 .", timeout=60)
        sb.reset(PRISTINE)
        res = sb.run("cat build/setup.txt; stat -c %a .", timeout=60)
        assert res.output.split() == ["built", "700"]
