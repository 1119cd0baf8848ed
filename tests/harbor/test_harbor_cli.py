"""The Harbor tier (`make test-harbor`): the Harbor export read by Harbor's own CLI (harbor 0.25.0, which needs
Python >= 3.12: scripts/harbor-venv.sh builds its virtualenv once and the target sets SSRKIT_HARBOR_VENV).

`harbor lint` checks the exported task directories statically. `harbor run` is not run: its docker environment
drives `docker compose` (the Compose v2 plugin), which no package registry this project uses provides (Debian
bookworm and PyPI have only docker-compose 1.29, a different command); docs/export.md says so. The verifier
itself (tests/test.sh, grade.py) runs in tests/solve/test_export_peers.py against ssrkit's own verdicts.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

VENV = os.environ.get("SSRKIT_HARBOR_VENV", "")
if not VENV:
    pytest.skip("the Harbor tier runs with `make test-harbor` (SSRKIT_HARBOR_VENV unset)", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fixtures.repos import EXAMPLES, copy_artifact  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402

ARTIFACT = "textkit/valid-slug-truncate-off-by-one"


def ssrkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ssrkit", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=600)


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> Path:
    """One valid example artifact, validated and exported as a Harbor task directory."""
    tmp = tmp_path_factory.mktemp("harbor")
    repo = {p.name: p for p in materialize(EXAMPLES / "repos", tmp / "repos")}["textkit"]
    art = copy_artifact(EXAMPLES / "artifacts" / ARTIFACT, tmp / "art")
    assert ssrkit("validate", str(art), "--repo", str(repo)).returncode == 0
    res = ssrkit("export", str(art), "--repo", str(repo), "--format", "harbor", "--out", str(tmp / "out"))
    assert res.returncode == 0, res.stderr
    [task] = list((tmp / "out").iterdir())
    return task


def lint(*args: str) -> list[str]:
    res = subprocess.run([f"{VENV}/bin/harbor", "lint", *args], capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1), res.stdout + res.stderr
    return sorted(line.split("[", 1)[1].split("]", 1)[0] for line in res.stdout.splitlines() if " [" in line)


def test_harbor_reads_the_export_and_flags_only_the_shared_verifier(task):
    """Harbor parses task.toml, the Dockerfile and the verifier; by its default rules the one finding is the
    shared verifier, the known limit docs/export.md states (the verifier runs in the agent's container)."""
    assert lint(str(task)) == ["shared-verifier"]
    # every rule: also the local base image (ssrkit/base:bookworm, made without a registry) and the root agent
    assert lint("--select", "ALL", str(task)) == ["root-agent", "shared-verifier", "unpinned-image"]
