"""`--ray-address` as a new user meets it (issue 31, item 2): an address nobody listens on is a one-line error
within seconds (Ray alone retried it for 10+ minutes); without an address, a cluster `ray start` registered
here is left alone (the command starts its own) and `--ray-address auto` joins it; that cluster stops, and
only it, when its own `ray start --block` process ends, as docs/cluster.md teaches."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from fixtures.net import free_port
from fixtures.paths import EXAMPLES, ROOT
from fixtures.repos import copy_artifact

pytest.importorskip("ray")

#: under xdist (`make test`): one Ray cluster on this machine at a time
pytestmark = pytest.mark.xdist_group("ray")

#: fails its static checks: the unit is cheap, but still runs as a Ray task
INVALID = "textkit/invalid-files"


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def ssrkit(*args: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ssrkit", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**env, "PYTHONPATH": str(ROOT / "src")}, timeout=timeout)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return {**env, **extra}


def test_an_address_nobody_listens_on_is_a_one_line_error_within_seconds(tmp_path, example_repos):
    art = copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "a")
    port = free_port()
    t0 = time.monotonic()
    res = ssrkit("validate", str(art), "--repo", str(example_repos["textkit"]), "--executor", "ray",
                 "--ray-address", f"127.0.0.1:{port}", env=clean_env(), timeout=90)
    took = time.monotonic() - t0
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [
        f"error: could not reach the Ray cluster at 127.0.0.1:{port}: nothing listens there (Connection refused); "
        f"start it (ray start --head --port {port} --resources '{{\"ssrkit_sandbox\": N}}', docs/cluster.md) or "
        f"give the address `ray start` printed (--ray-address, $RAY_ADDRESS)"]
    assert took < 30, f"{took:.0f}s"
    assert not (art / "validation.json").exists()


def test_a_registered_cluster_is_left_alone_joined_with_auto_and_stopped_alone(tmp_path, example_repos):
    """`ray start --head --block` registers its cluster in $RAY_TMPDIR (a private one here, so no other Ray
    on this machine sees it); ending that process stops that cluster and nothing else."""
    ray_tmp = Path(tempfile.mkdtemp(prefix="ssr-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    # token authentication on, with a token of this test's own (as docs/cluster.md says to, for joining by
    # address: `ray start` turns it on by itself where ~/.ray/auth_token exists)
    env = clean_env(RAY_TMPDIR=str(ray_tmp), RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=uuid.uuid4().hex)
    port = free_port()
    head = subprocess.Popen(
        [str(Path(sys.executable).parent / "ray"), "start", "--head", f"--port={port}", "--num-cpus=1",
         '--resources={"ssrkit_sandbox": 1}', "--object-store-memory=100000000", "--include-dashboard=false",
         "--disable-usage-stats", "--block"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        registered = ray_tmp / "ray" / "ray_current_cluster"
        deadline = time.monotonic() + 120
        while not (registered.is_file() and listening(port)) and time.monotonic() < deadline:
            assert head.poll() is None, "ray start --head exited"
            time.sleep(0.5)
        assert registered.is_file() and listening(port)

        own = ssrkit("validate", str(copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "own")), "--repo",
                     str(example_repos["textkit"]), "--executor", "ray", "--json", env=env, timeout=300)
        assert own.returncode == 1, own.stderr  # validated (invalid), on a one-node Ray of its own
        assert "note: a Ray cluster started with `ray start` is registered here" in own.stderr
        assert "--ray-address auto to use that one" in own.stderr and "num_cpus" not in own.stderr

        joined = ssrkit("validate", str(copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "joined")),
                        "--repo", str(example_repos["textkit"]), "--executor", "ray", "--ray-address", "auto",
                        "--json", env=env, timeout=300)
        assert joined.returncode == 1, joined.stderr
        assert "registered here" not in joined.stderr
        named = ssrkit("validate", str(copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "named")),
                       "--repo", str(example_repos["textkit"]), "--executor", "ray", "--ray-address",
                       f"127.0.0.1:{port}", "--json", env=env, timeout=300)
        assert named.returncode == 1, named.stderr
    finally:
        head.terminate()  # what docs/cluster.md says: end your own `ray start --block`, never `ray stop`
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(head.pid, 9)
            head.wait()
        deadline = time.monotonic() + 60
        while listening(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert not listening(port), "the cluster's GCS still answers after its ray start --block ended"
