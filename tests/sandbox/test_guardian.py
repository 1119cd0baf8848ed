"""The guardian of a process's local sandboxes (`sandbox/_guardian.py`, issue 30.3): one a process, started
again when it was killed, gone when its process ends normally, running nothing but its own file, and
working where there is neither a cgroup nor /dev/shm. What it removes after a SIGKILL under overlays is
`test_overlay.py`'s; `benchmarks/crash_cleanup.py` does it ten times under load."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")

_LIFE = textwrap.dedent("""\
    import json, os, sys
    sys.path.insert(0, {src!r})
    from ssrkit.sandbox import _cleanup, open_sandbox
    from ssrkit.sandbox.local import _session
    from ssrkit.store.source import RepoSource

    def guardians():
        out = []
        for p in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{{p}}/stat", "rb").read()
                cmd = open(f"/proc/{{p}}/cmdline", "rb").read()
            except OSError:
                continue
            if int(stat[stat.rfind(b")") + 2:].split()[1]) == os.getpid() and b"_guardian.py" in cmd:
                out.append(int(p))
        return out

    def read(path):
        try:
            return open(path, "rb").read().decode()
        except OSError:
            return None

    def listdir(path):
        try:
            return os.listdir(path)
        except OSError:
            return []

    def sandbox():
        with open_sandbox(RepoSource.local({repo!r}), "local") as sb:
            assert sb.run("true", timeout=60).ok
        return _session().guardian

    _, held = os.pipe()
    os.set_inheritable(held, True)  # a descriptor ssrkit inherited from its caller (a pipe it waits on)
    first = sandbox()
    _cleanup.close_all()  # the cleanup at exit, as a long-lived process (a Ray worker, a test run) may run it
    again = sandbox()      # a new session: the same guardian
    twice = guardians()
    os.kill(again, 9)      # killed on its own
    os.waitpid(again, 0)
    third = sandbox()      # the next sandbox is guarded again
    print(json.dumps({{"first": first, "again": again, "twice": twice, "third": third, "after": guardians(),
                      "base": _session().base,
                      "argv": (read(f"/proc/{{third}}/cmdline") or "").split("\\0")[:-1],
                      "environ": read(f"/proc/{{third}}/environ"),
                      "fds": [os.readlink(f"/proc/{{third}}/fd/{{fd}}") for fd in listdir(f"/proc/{{third}}/fd")]}}))
""")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().split(b") ")[1][:1] not in (b"Z", b"X")
    except OSError:
        return False


def _gone_within(check, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds  # a loaded machine: the guardian must be scheduled
    while check() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not check()


def test_one_guardian_a_process_started_again_when_killed_gone_after_a_normal_exit(shared_repo):
    proc = subprocess.run([sys.executable, "-c", _LIFE.format(src=SRC, repo=str(shared_repo))],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert seen["first"] and seen["again"] == seen["first"] and seen["twice"] == [seen["first"]]
    assert seen["third"] not in (None, seen["first"]) and seen["after"] == [seen["third"]]
    # it runs its own file and nothing else, with no environment (no secret) and no descriptor of ssrkit's
    assert seen["argv"][1:3] == ["-I", "-S"] and seen["argv"][3].endswith("sandbox/_guardian.py")
    assert seen["environ"] == ""
    assert not [fd for fd in seen["fds"] if fd.startswith("pipe:")], seen["fds"]
    assert _gone_within(lambda: _alive(seen["third"]))  # the process ended normally: so does its guardian
    assert not os.path.exists(seen["base"])


_BARE = textwrap.dedent("""\
    import os, sys
    sys.path.insert(0, {src!r})
    from ssrkit.sandbox import local
    local._cgroup.parent_dir = lambda controller="pids": None  # no cgroup to be had
    root, me = {root!r}, os.getpid()
    guardian = local._start_guardian(root, f"ssrkit-{{me}}-")
    mine = os.path.join(root, f"ssrkit-{{me}}-abc")
    os.makedirs(os.path.join(mine, "ws", "ro", "deep"))
    open(os.path.join(mine, "ws", "ro", "deep", "f"), "w").write("x")
    for d in ("ws/ro/deep", "ws/ro"):
        os.chmod(os.path.join(mine, d), 0o500)
    os.makedirs(os.path.join(root, f"ssrkit-{{me}}0-abc"))  # another process's (pid ME0)
    print(guardian, mine, flush=True)
    os.kill(me, 9)
""")


def test_a_guardian_without_cgroups_or_dev_shm_removes_its_process_files(tmp_path):
    """The temp root is the temp dir where /dev/shm is not writable, and there may be no cgroup: the guardian
    still removes what the process left under its own names, and nothing of another process's."""
    proc = subprocess.run([sys.executable, "-c", _BARE.format(src=SRC, root=str(tmp_path))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    guardian, mine = proc.stdout.split()
    assert int(guardian) > 0
    assert _gone_within(lambda: os.path.exists(mine))
    assert _gone_within(lambda: _alive(int(guardian)))
    assert [p.name for p in tmp_path.iterdir()] == [f"ssrkit-{Path(mine).name.split('-')[1]}0-abc"]
