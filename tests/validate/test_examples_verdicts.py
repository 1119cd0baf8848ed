"""Every check passes on a valid example and fails on the example written to fail it (examples/artifacts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.paths import EXAMPLES
from fixtures.repos import copy_artifact
from ssrkit.store.artifact import Artifact
from ssrkit.store.source import RepoSource
from ssrkit.validate import CHECK_NAMES, Settings, Validator, validate_all

EXPECTED = json.loads((EXAMPLES / "artifacts" / "expected.json").read_text())
F2P = json.loads((EXAMPLES / "artifacts" / "fail_to_pass.json").read_text())


@pytest.fixture(scope="module")
def verdicts(example_repos, tmp_path_factory) -> dict[str, dict]:
    """Validate every example artifact once (2 jobs), from copies so the checkout stays clean."""
    work = tmp_path_factory.mktemp("artifacts")
    items = []
    for rel in EXPECTED:
        repo_name = rel.split("/")[0]
        art = Artifact(copy_artifact(EXAMPLES / "artifacts" / rel, work / rel))
        items.append((art, RepoSource.local(example_repos[repo_name])))
    results = validate_all(items, Validator(Settings(jobs=2)))
    return {rel: r for rel, r in zip(EXPECTED, results)}


@pytest.mark.parametrize("rel", sorted(EXPECTED))
def test_verdict_matches_expected(verdicts, rel):
    expected, result = EXPECTED[rel], verdicts[rel]
    first = next((c for c in result["checks"] if c["status"] == "failed"), None)
    assert result["valid"] == expected["valid"], first
    assert (first["name"] if first else None) == expected["fails"]
    assert sorted(result["warnings"]) == sorted(expected.get("warnings", []))
    if first:
        # the failing verdict names the check and says what to do; everything after it depending on it is skipped
        assert len(first["message"]) > 20
        later = [c for c in result["checks"] if CHECK_NAMES.index(c["name"]) > CHECK_NAMES.index(first["name"])]
        assert all(c["status"] in ("skipped", "passed") for c in later)
        if CHECK_NAMES.index(first["name"]) > CHECK_NAMES.index("bug_breaks"):  # what bug_breaks measured stays
            assert result["fail_to_pass"] == sorted(F2P[rel]) and result["pass_to_pass"]
        elif first["name"] != "bug_breaks":
            assert result["fail_to_pass"] == [] and result["pass_to_pass"] == []


def test_every_check_is_failed_by_some_example_and_passed_by_a_valid_one(verdicts):
    failed = {EXPECTED[rel]["fails"] for rel in EXPECTED if EXPECTED[rel]["fails"]}
    assert failed == set(CHECK_NAMES)
    for rel, r in verdicts.items():
        if EXPECTED[rel]["valid"]:
            assert all(c["status"] in ("passed", "warning") for c in r["checks"])


@pytest.mark.parametrize("rel", sorted(k for k in F2P if EXPECTED[k]["valid"]))
def test_fail_to_pass_recorded(verdicts, rel):
    assert verdicts[rel]["fail_to_pass"] == sorted(F2P[rel])
    assert verdicts[rel]["pass_to_pass"] or "total_break" in verdicts[rel]["warnings"]
    assert not set(verdicts[rel]["fail_to_pass"]) & set(verdicts[rel]["pass_to_pass"])


def test_validation_json_and_logs_written(verdicts):
    for rel, r in verdicts.items():
        path = Path(r["artifact"])
        on_disk = json.loads((path / "validation.json").read_text())
        assert on_disk["valid"] == r["valid"]
        assert {"artifact", "valid", "checks", "fail_to_pass", "pass_to_pass"} <= set(on_disk)
        for c in on_disk["checks"]:
            assert set(c) >= {"name", "status", "message", "seconds"}
            assert c["status"] in ("passed", "failed", "warning", "skipped")
        for run in on_disk["runs"].values():
            assert (path / run["log"]).is_file()
