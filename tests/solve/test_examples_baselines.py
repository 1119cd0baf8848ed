"""On every valid example artifact the oracle passes and the empty patch fails (a check of the grading)."""

from __future__ import annotations

import pytest

from fixtures.solving import VALID_EXAMPLES, copy_validated
from ssrkit.solve.solvers import make_solver
from ssrkit.store.source import RepoSource

VALID = VALID_EXAMPLES


def test_there_are_valid_examples_of_both_runners():
    assert any(n.startswith("ledger/") for n in VALID) and any(n.startswith("textkit/") for n in VALID)


@pytest.mark.parametrize("name", VALID)
def test_oracle_passes_and_null_fails(name, example_repos, validated_examples, engine, tmp_path):
    validated, result = validated_examples[name]
    assert result["valid"], [c for c in result["checks"] if c["status"] == "failed"]
    art = copy_validated(validated, tmp_path / name.replace("/", "-"))
    source = RepoSource.local(example_repos[name.split("/")[0]])
    [oracle] = engine.solve([(art, source)], make_solver("oracle"), attempts=1)
    assert oracle["passed"], oracle["reason"]
    assert oracle["canary"]["status"] == "caught", oracle["canary"]
    [null] = engine.solve([(art, source)], make_solver("null"), attempts=2)
    assert not null["passed"]
    assert "FAIL_TO_PASS" in null["reason"]


def test_repair_baseline_fixes_an_off_by_one(example_repos, validated_examples, engine, tmp_path):
    validated, result = validated_examples["textkit/valid-slug-truncate-off-by-one"]
    assert result["valid"]
    art = copy_validated(validated, tmp_path / "slug")
    source = RepoSource.local(example_repos["textkit"])
    [rec] = engine.solve([(art, source)], make_solver("repair", budget_runs=15), attempts=1)
    assert rec["solver"] == "repair" and rec["solver_info"]["found"], rec["solver_info"]
    assert rec["passed"], rec["reason"]
    fix = (art.path / "attempts" / "001" / "fix.diff").read_text()
    assert "src/textkit/slug.py" in fix and "tests/" not in fix
