"""Sandboxes labelled with their run, and the reaper (`ssrkit.sandbox.reap`): a run's sandboxes are removed
(their commands killed) whichever live process holds them; orphans of dead processes are removed; under
`--executor ray` every node reaps orphans when a run starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.paths import SRC
from ssrkit.sandbox import _cleanup
from ssrkit.sandbox.local import LABEL, _tmp_root
from ssrkit.sandbox.reap import reap


#: a process that opens a local sandbox of $SSRKIT_RUN, says where, and runs a long command in it
HOLDER = r"""
import sys
from ssrkit.sandbox.local import LocalSandbox
sb = LocalSandbox(sys.argv[1])
print(sb.dir, flush=True)
res = sb.run("echo started > $HOME/started; sleep 300", timeout=600)
print("ended", res.exit_code, flush=True)
sb.close()
"""


def labels_of(run: str) -> list[Path]:
    return [p.parent for p in Path(_tmp_root()).glob(f"ssrkit-*/sb-*/{LABEL}")
            if json.loads(p.read_text()).get("run") == run]


def holder(repo: Path, run: str) -> tuple[subprocess.Popen, Path]:
    env = {**os.environ, "PYTHONPATH": str(SRC), _cleanup.RUN_ENV: run}
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(repo)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    box = Path(proc.stdout.readline().strip())
    assert box.is_dir(), proc.stderr.read()
    deadline = time.monotonic() + 60
    while not (box / "home" / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (box / "home" / "started").exists(), "the command never started"
    return proc, box


@pytest.fixture
def repo(example_repos) -> Path:
    return example_repos["textkit"]


def test_every_sandbox_is_labelled_with_the_run(repo, monkeypatch):
    from ssrkit.sandbox.local import LocalSandbox

    monkeypatch.setattr(_cleanup, "_run", None)
    monkeypatch.setenv(_cleanup.RUN_ENV, "label-test")
    with LocalSandbox(repo) as sb:
        label = json.loads((Path(sb.dir) / LABEL).read_text())
        assert label["run"] == "label-test" and label["pid"] == os.getpid()
        if sb.cgroup is not None:
            assert label["cgroups"] == sb.cgroup.paths
    _cleanup.set_run_id("another-run")
    assert _cleanup.run_id() == "another-run"
    with pytest.raises(Exception, match="run id"):
        _cleanup.set_run_id("no spaces/or slashes")


def test_reap_run_kills_and_removes_sandboxes_of_live_processes(repo):
    run, other = f"reap-{os.getpid()}", f"keep-{os.getpid()}"
    victim, box = holder(repo, run)
    bystander, kept = holder(repo, other)
    try:
        got = reap(run, docker=False)
        assert got.local == 1
        assert not box.exists() and labels_of(run) == []
        assert kept.is_dir() and labels_of(other) == [kept]  # another run's sandbox is left alone
        from ssrkit.sandbox import _cgroup

        if _cgroup.parent_dir("pids") is not None:
            # its command was killed through its cgroup: the holder's run() returns at once
            out, _ = victim.communicate(timeout=60)
            assert "ended" in out
    finally:
        for p in (victim, bystander):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(60)
    assert not kept.exists()  # the bystander closed its own sandbox on SIGTERM


def test_reap_removes_orphans_of_dead_processes(repo):
    run = f"orphan-{os.getpid()}"
    proc, box = holder(repo, run)
    proc.kill()  # SIGKILL: no cleanup runs
    proc.wait(30)
    assert box.is_dir()
    reap(None, docker=False)  # no run named: only what dead processes left
    assert not box.parent.exists()


def test_ray_run_start_reaps_orphans_on_every_node(ray_cluster, repo, tmp_path, monkeypatch):
    """A worker killed with its sandbox open leaves it behind; the next run's start removes it, though that
    run opens no sandbox on the node."""
    pytest.importorskip("ray")
    import ray

    from ssrkit.executor.ray import RayExecutor

    @ray.remote(num_cpus=0, max_retries=0)
    def orphan(marker: str, repo_dir: str) -> None:
        """A unit whose worker dies (SIGKILL) with a sandbox open, as when a node's worker is OOM-killed.
        (Defined here, so it travels by value: the nodes cannot import this test module.)"""
        import os
        import signal
        from pathlib import Path

        from ssrkit.sandbox.local import LocalSandbox

        sb = LocalSandbox(repo_dir)
        Path(marker).write_text(sb.dir)
        os.kill(os.getpid(), signal.SIGKILL)

    marker = tmp_path / "box"
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(orphan.remote(str(marker), str(repo)))
    box = Path(marker.read_text())
    assert box.is_dir()
    with RayExecutor(3) as ex:
        ex._wait_reap(ex._startup_reap)
    assert not box.exists()


def test_docker_sandboxes_carry_the_run_and_reap_removes_the_runs(example_repos, monkeypatch):
    """Containers are labelled `ssrkit.run`; `reap(run)` removes that run's containers, not another's."""
    from ssrkit.errors import SsrkitError
    from ssrkit.sandbox.docker import RUN_LABEL, DockerSandbox
    from ssrkit.sandbox.factory import docker_available

    why = docker_available()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    from ssrkit.sandbox.image import build_image

    try:
        image = build_image(example_repos["textkit"], tag="ssrkit-test/reap:latest", build_base=False)
    except SsrkitError as e:
        pytest.skip(f"no base image to build on: {e}")
    run, other = f"dreap-{os.getpid()}", f"dkeep-{os.getpid()}"
    monkeypatch.setattr(_cleanup, "_run", None)
    _cleanup.set_run_id(run)
    victim = DockerSandbox(image)
    _cleanup.set_run_id(other)
    kept = DockerSandbox(image)
    try:
        victim.container.reload()
        assert victim.container.labels[RUN_LABEL] == run
        got = reap(run)
        assert got.containers == 1
        names = {c.name for c in kept.client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run}"})}
        assert names == set()
        kept.container.reload()
        assert kept.container.status == "running"
    finally:
        victim.close()
        kept.close()


def test_ray_cancel_kills_stuck_units_and_reaps_their_sandboxes(ray_cluster, repo, monkeypatch):
    """A unit that ignores the cancellation (it swallows KeyboardInterrupt) has its worker killed after the
    grace period; its sandbox, which no one closed, is removed by the run's reapers: when cancel() returns,
    no sandbox of the run exists and every slot is free."""
    import ray

    from ssrkit.executor import ray as ray_executor
    from ssrkit.executor.ray import SLOT_RESOURCE, RayExecutor

    def stubborn(repo_dir: str) -> None:
        import time

        from ssrkit.sandbox.local import LocalSandbox

        sb = LocalSandbox(repo_dir)  # never closed
        open(f"{sb.dir}/opened", "w").close()  # the constructor returned: an interrupt now cannot close it
        while True:
            try:
                time.sleep(1)
            except KeyboardInterrupt:
                pass

    run = f"stuck-{os.getpid()}"
    monkeypatch.setattr(_cleanup, "_run", None)
    _cleanup.set_run_id(run)
    monkeypatch.setattr(ray_executor, "CANCEL_GRACE_S", 3.0)
    ex = RayExecutor(3)
    try:
        # the start-up reap (orphans of dead processes, not waited for) must be over: run late, on a loaded
        # machine, it would remove the killed workers' sandboxes before the run's reapers could count them
        ex._wait_reap(ex._startup_reap)
        futures = [ex.submit(stubborn, str(repo)) for _ in range(3)]
        # every unit's sandbox open, not only labelled: a unit interrupted inside the constructor closes its
        # sandbox itself (as it should), and then the reapers would have nothing to count
        deadline = time.monotonic() + 120
        while sum((box / "opened").exists() for box in labels_of(run)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sum((box / "opened").exists() for box in labels_of(run)) == 3, "the units did not start"
        ex.cancel()
        assert labels_of(run) == []
        assert ex.reaped[0] >= 1  # what the force-killed workers left, the reapers removed
        for f in futures:
            with pytest.raises(BaseException):
                f.result(timeout=30)
    finally:
        ex.close()
    total = ray.cluster_resources()[SLOT_RESOURCE]
    deadline = time.monotonic() + 30
    while ray.available_resources().get(SLOT_RESOURCE, 0) != total and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get(SLOT_RESOURCE, 0) == total


def test_a_forged_label_cannot_make_the_reaper_kill_outside_its_sandboxes(tmp_path):
    """label.json lists the cgroups the reaper kills; one naming anything but a cgroup ssrkit made (here a
    directory whose cgroup.procs lists an unrelated process) is ignored: that process survives, while the
    sandbox directory itself is still removed."""
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        fake = tmp_path / "ssrkit-1-1"  # the right name, the wrong place
        fake.mkdir()
        (fake / "cgroup.procs").write_text(f"{bystander.pid}\n")
        run = f"forged-{os.getpid()}"
        sess = Path(_tmp_root()) / f"ssrkit-{os.getpid()}-forged"
        box = sess / "sb-forged"
        box.mkdir(parents=True)
        (box / LABEL).write_text(json.dumps({"run": run, "pid": os.getpid(), "cgroups": [str(fake)],
                                             "controllers": ["pids"]}))
        assert reap(run, docker=False).local == 1
        assert not box.exists()
        time.sleep(0.2)
        assert bystander.poll() is None, "the reaper killed a process outside ssrkit's cgroups"
    finally:
        bystander.kill()
        bystander.wait()
        import shutil

        shutil.rmtree(Path(_tmp_root()) / f"ssrkit-{os.getpid()}-forged", ignore_errors=True)
