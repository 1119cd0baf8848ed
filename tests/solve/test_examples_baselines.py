"""On every valid example artifact the oracle passes and the empty patch fails (a check of the grading)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ssrkit.artifact import Artifact
from ssrkit.examples import materialize
from ssrkit.solve.solvers import make_solver
from ssrkit.source import RepoSource

from .conftest import validate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
EXPECTED = json.loads((EXAMPLES / "artifacts" / "expected.json").read_text())
VALID = sorted(name for name, v in EXPECTED.items() if v["valid"])


@pytest.fixture(scope="module")
def example_repos(tmp_path_factory):
    return {p.name: p for p in materialize(EXAMPLES / "repos", tmp_path_factory.mktemp("example-repos"))}


def test_there_are_valid_examples_of_both_runners():
    assert any(n.startswith("ledger/") for n in VALID) and any(n.startswith("textkit/") for n in VALID)


@pytest.mark.parametrize("name", VALID)
def test_oracle_passes_and_null_fails(name, example_repos, engine, tmp_path):
    repo_name = name.split("/")[0]
    art = Artifact(shutil.copytree(EXAMPLES / "artifacts" / name, tmp_path / name.replace("/", "-")))
    source = RepoSource.local(example_repos[repo_name])
    result = validate(art, source)
    assert result["valid"], [c for c in result["checks"] if c["status"] == "failed"]
    [oracle] = engine.solve([(art, source)], make_solver("oracle"), attempts=1)
    assert oracle["passed"], oracle["reason"]
    assert oracle["canary"]["status"] == "caught", oracle["canary"]
    [null] = engine.solve([(art, source)], make_solver("null"), attempts=2)
    assert not null["passed"]
    assert "FAIL_TO_PASS" in null["reason"]


def test_repair_baseline_fixes_an_off_by_one(example_repos, engine, tmp_path):
    name = "textkit/valid-slug-truncate-off-by-one"
    art = Artifact(shutil.copytree(EXAMPLES / "artifacts" / name, tmp_path / "slug"))
    source = RepoSource.local(example_repos["textkit"])
    assert validate(art, source)["valid"]
    [rec] = engine.solve([(art, source)], make_solver("repair", budget_runs=15), attempts=1)
    assert rec["solver"] == "repair" and rec["solver_info"]["found"], rec["solver_info"]
    assert rec["passed"], rec["reason"]
    fix = (art.path / "attempts" / "001" / "fix.diff").read_text()
    assert "src/textkit/slug.py" in fix and "tests/" not in fix
