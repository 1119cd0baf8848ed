"""The solver's sandbox: buggy code and weakened tests, one fresh commit, nothing else to find."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from fixtures import calc_pkg
from ssrkit.store.artifact import Artifact
from ssrkit.sandbox.local import isolation_available
from ssrkit.solve.solvers import Solver, SolverOutput


class Spy(Solver):
    name = "spy"

    def __init__(self, probes: dict[str, str]):
        self.probes = probes
        self.seen: dict[str, str] = {}

    def solve(self, ctx):
        for key, cmd in self.probes.items():
            self.seen[key] = ctx.sandbox.run(cmd, timeout=30).output.strip()
        ctx.sandbox.write_file("NOTES.md", "scratch notes\n")  # new files are part of the fix
        ctx.sandbox.run("git add -A && git -c user.name=a -c user.email=a@a commit -qm wip", timeout=30)
        return SolverOutput()


@pytest.fixture
def outside_tmp_artifact(calc_artifact):
    """A copy of the artifact outside /tmp (each sandbox has a private /tmp, which would hide it anyway)."""
    base = Path(tempfile.mkdtemp(prefix="ssrkit-solve-test-", dir=Path.home()))
    try:
        dest = base / "calc-bug"
        shutil.copytree(calc_artifact.path, dest)
        yield Artifact(dest)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_solver_sees_only_the_buggy_state(engine, outside_tmp_artifact, calc_pkg_repo):
    art = outside_tmp_artifact
    spy = Spy({
        "log": "git log --oneline | wc -l",
        "status": "git status --short | wc -l",
        "ops": "cat src/calc/ops.py",
        "tests": "cat tests/test_ops.py",
        "orig": f"cat {calc_pkg_repo}/src/calc/ops.py",
        "artifact": f"cat {art.path}/bug_inject.diff 2>&1; ls -A {art.path} 2>&1 | wc -l",
        "mountinfo": f"grep -c {art.path.name} /proc/self/mountinfo",
        "find": f"grep -rl 'return hi' /dev/shm /tmp \"$HOME\" {calc_pkg_repo.parent} {Path.home()} "
                "--include=ops.py 2>/dev/null | head -3",
    })
    [rec] = engine.solve([(art, art.metadata.repo)], spy, attempts=1)
    seen = spy.seen
    assert seen["log"] == "1" and seen["status"] == "0"
    assert seen["ops"] == calc_pkg.BUGGY_OPS.strip()
    assert "def test_clamp_high" not in seen["tests"]
    if isolation_available() is None:  # bubblewrap: the artifact is hidden, the original code nowhere
        assert seen["orig"] == seen["ops"]  # the workspace is mounted at the original path
        assert "+++" not in seen["artifact"]
        assert seen["artifact"].endswith("0") or "No such file" in seen["artifact"]
        assert seen["mountinfo"] == "0"  # the hidden artifact leaves no trace in the mount table
        assert seen["find"] == ""
    # the fix is measured against the fresh commit even though the solver committed its work
    fix = (art.path / "attempts" / "001" / "fix.diff").read_text()
    assert "NOTES.md" in fix
    assert not rec["passed"]
