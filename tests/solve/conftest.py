from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Callable

import pytest

from ssrkit.artifact import Artifact
from ssrkit.solve.grade import GradeSettings
from ssrkit.sandbox import SandboxOptions
from ssrkit.solve import Engine, SolveOptions
from ssrkit.solve.solvers import Solver, SolverOutput
from ssrkit.validate import Settings, Validator, validate_all, write_report

from . import calc

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


#: `python` in the example artifacts' test scripts must be this interpreter (it has pytest)
SANDBOX = SandboxOptions(env={"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"})


def make_engine(**grade_kw) -> Engine:
    return Engine(SolveOptions(grade=GradeSettings(timeout=60, **grade_kw), backend="local", sandbox=SANDBOX))


def validate(artifact: Artifact, source=None) -> dict:
    validator = Validator(Settings(cache=False), backend="local", options=SANDBOX)
    [result] = validate_all([(artifact, source or artifact.metadata.repo)], validator, redo=True)
    return result


@pytest.fixture(scope="session")
def calc_repo(tmp_path_factory) -> Path:
    return calc.make_repo(tmp_path_factory.mktemp("repos") / "calc")


@pytest.fixture(scope="session")
def calc_validated(tmp_path_factory, calc_repo) -> Artifact:
    art = calc.make_artifact(tmp_path_factory.mktemp("arts") / "calc-bug", calc_repo)
    result = validate(art)
    assert result["valid"], result
    assert sorted(result["fail_to_pass"]) == calc.F2P
    return art


@pytest.fixture
def calc_artifact(calc_validated, tmp_path) -> Artifact:
    """A private copy of the validated artifact (attempts written by one test stay in it)."""
    dest = tmp_path / "calc-bug"
    shutil.copytree(calc_validated.path, dest)
    return Artifact(dest)


@pytest.fixture
def engine() -> Engine:
    return make_engine()


Edit = str | None | Callable[[str], str]


class ScriptedSolver(Solver):
    """Writes (or deletes, or transforms) files in the solver's sandbox; the fix is the resulting diff."""

    name = "scripted"

    def __init__(self, edits: dict[str, Edit], symlinks: dict[str, str] | None = None):
        self.edits = edits
        self.symlinks = symlinks or {}

    def solve(self, ctx):
        sb = ctx.sandbox
        for path, edit in self.edits.items():
            if edit is None:
                sb.run(f"rm -f {path}", timeout=30)
            elif callable(edit):
                sb.write_file(path, edit(sb.read_file(path).decode()))
            else:
                sb.write_file(path, edit)
        for link, target in self.symlinks.items():
            sb.run(f"rm -f {link} && ln -s {target} {link}", timeout=30)
        return SolverOutput()


