from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

from ssrkit.artifact import Artifact
from ssrkit.grade import GradeSettings
from ssrkit.solve import Engine, SolveOptions
from ssrkit.validate import Settings, Validator, validate_all, write_report

from . import calc

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
from ._dirsandbox import DirSandbox


class DirValidator(Validator):
    def open(self, source):
        return DirSandbox(source.path)

    def fingerprint(self, source):
        return hashlib.sha256(str(source.path).encode()).hexdigest()


class DirEngine(Engine):
    def open(self, source):
        return DirSandbox(source.path)


def make_engine(**grade_kw) -> Engine:
    return DirEngine(SolveOptions(grade=GradeSettings(timeout=60, **grade_kw)))


def validate(artifact: Artifact) -> dict:
    [result] = validate_all([(artifact, artifact.metadata.repo)], DirValidator(Settings(cache=False)), redo=True)
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
