"""`ssrkit export` on a run made by the recipe: SWE-bench instances that apply, SFT data only from LLM solvers."""

from __future__ import annotations

import json

import pytest

from fixtures.cli import in_process
from fixtures.git import git


@pytest.fixture
def export(capsys):
    """`ssrkit export ARGS` in this process (fixtures.cli); it must succeed."""
    def run(*args: str):
        proc = in_process(capsys, "export", *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc
    return run


def test_swebench_instances_apply_to_their_base_commit(offline_run, calc_profile_repo, tmp_path, export):
    out = tmp_path / "bugs.jsonl"
    proc = export(str(offline_run / "round-001" / "inject"), "--format", "swebench", "--out", str(out))
    instances = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(instances) == 2 and "exported 2 swebench record(s)" in proc.stderr
    head = git(calc_profile_repo, "rev-parse", "HEAD").strip()
    for inst in instances:
        assert inst["instance_id"].startswith("calc__ssr-") and inst["repo"] == "ssrkit/calc"
        assert inst["repo_path"] == str(calc_profile_repo)
        assert inst["original_commit"] == head and inst["base_commit"] != head
        assert inst["log_parser"] == "parse_log_gotest" and ">>>>> Start Test Output" in inst["eval_script"]
        assert json.loads(inst["FAIL_TO_PASS"]) and isinstance(json.loads(inst["PASS_TO_PASS"]), list)
        assert "tests/" in inst["test_patch"] and "tests/" not in inst["patch"].split("\n", 1)[0]
        # a checkout of base_commit (the buggy, weakened tree), in a clone: the user's tree is never touched
        work = tmp_path / inst["instance_id"]
        git(tmp_path, "clone", "-q", "--no-checkout", str(calc_profile_repo), str(work))
        git(work, "fetch", "-q", "origin", f"refs/ssrkit/{inst['instance_id'].split('ssr-')[1]}")
        git(work, "checkout", "-q", inst["base_commit"])
        # the buggy snapshot has no history: neither the original code nor the past is visible from it
        assert git(work, "rev-list", "--count", "HEAD").strip() == "1"
        for name in ("patch", "test_patch"):
            (work / f"{name}.diff").write_text(inst[name])
            git(work, "apply", "--check", f"{name}.diff")
        git(work, "apply", "patch.diff")
        git(work, "apply", "test_patch.diff")
        (work / "patch.diff").unlink()
        (work / "test_patch.diff").unlink()
        assert git(work, "diff", inst["original_commit"], "--stat") == ""  # fix + tests = the original tree
    assert git(calc_profile_repo, "status", "--porcelain") == ""


def test_sft_needs_llm_trajectories(offline_run, tmp_path, export):
    out = tmp_path / "sft.jsonl"
    proc = export(str(offline_run), "--format", "sft", "--out", str(out))
    assert out.read_text() == "" and "exported 0 sft record(s)" in proc.stderr  # repair leaves no chat
