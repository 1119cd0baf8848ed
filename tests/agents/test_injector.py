"""The LLM injector end to end: a scripted model writes a real bug into a real repository."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from fixtures.agents import make_by_turn, tiny_injector_steps
from fixtures.git import git
from fixtures.scripted_server import bash, submit
from ssrkit.agents import AgentConfig, ModelClient, ModelError, Trajectory, injector_prompts
from ssrkit.store.artifact import CORE_FILES, Artifact
from ssrkit.errors import SsrkitError
from ssrkit.inject.llm import choose_strategy, run_llm_injection
from ssrkit.patch import touched_files
from ssrkit.store.source import RepoSource
from ssrkit.validate import Settings

KEY = "sk-injector-secret-31337"


def make_client(server, **kw):
    return ModelClient(server.base_url, "scripted-model", backoff_s=0.01, max_backoff_s=0.02, **kw)


def run_tests(repo: Path, art: Artifact, *diffs: str) -> dict[str, str]:
    """Apply `diffs` to a copy of `repo`, run the artifact's test script and parser: statuses."""
    work = repo.parent / f"check-{len(diffs)}"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(repo, work)
    for name in diffs:
        git(work, "apply", str(art.path / name))
    log = subprocess.run(["bash", str(art.path / "test_script.sh")], cwd=work, capture_output=True, text=True)
    out = subprocess.run(["python", str(art.path / "test_parser.py")], input=log.stdout, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_successful_injection_writes_a_complete_artifact(serve, sandbox, tiny_repo, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server = serve(make_by_turn(tiny_injector_steps), api_key=KEY, token_ids="vllm")
    out = tmp_path / "artifacts" / "a1"
    result = run_llm_injection(sandbox, make_client(server, want_token_ids=True), out_dir=out, strategy="removal",
                               seed=3, source=RepoSource.local(tiny_repo),
                               config=AgentConfig(max_turns=20, command_timeout=60))
    assert result.ok, result.error
    assert result.exit_status == "submitted" and result.artifact == out
    for name in (*CORE_FILES, "artifact.toml", "trajectory.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name

    art = Artifact(out)
    meta = tomllib.loads((out / "artifact.toml").read_text())
    assert meta["strategy"] == "removal" and meta["order"] == 1 and meta["id"] == art.content_id()
    assert meta["base_commit"] == git(tiny_repo, "rev-parse", "HEAD").strip()
    assert meta["repo"] == {"kind": "local", "path": str(tiny_repo)}
    inj = meta["injector"]
    assert (inj["agent"], inj["model"], inj["seed"], inj["trajectory"]) == ("llm", "scripted-model", 3,
                                                                            "trajectory.json")
    assert inj["strategy_mixture"] == {"removal": 0.5, "history": 0.5}
    assert art.test_files == ["tests/test_calc.py"]
    assert touched_files(art.bug_diff) == ["calc.py"]
    assert touched_files(art.weaken_diff) == ["tests/test_calc.py"] and "test_clamp_high" in art.weaken_diff
    assert "ssrkit_submission" not in art.bug_diff + art.weaken_diff

    traj = Trajectory.load(out / "trajectory.json")
    assert traj["role"] == "injector" and traj["exit_status"] == "submitted" and traj["error"] is None
    assert len(traj["turns"]) == 10 and all(t["completion_token_ids"] for t in traj["turns"])
    assert traj["info"]["strategy"] == "removal"
    assert "min_passing_tests" not in traj["messages"][1]["content"]  # filled in, not left as a name
    assert "at least\n   5 of them" in traj["messages"][1]["content"]

    # the artifact is real: the original passes, the bug breaks one test, the weakening hides it
    original = run_tests(tiny_repo, art)
    assert len(original) == 7 and set(original.values()) == {"passed"}
    buggy = run_tests(tiny_repo, art, "bug_inject.diff")
    assert buggy["tests/test_calc.py::test_clamp_high"] == "failed" and list(buggy.values()).count("passed") == 6
    weakened = run_tests(tiny_repo, art, "bug_inject.diff", "test_weaken.diff")
    assert len(weakened) == 6 and set(weakened.values()) == {"passed"}

    for f in out.rglob("*"):
        assert KEY not in f.read_text(errors="replace"), f
    assert all(KEY not in r["raw"] for r in server.requests)


def test_incomplete_submission_gets_one_second_chance_then_a_clear_error(serve, sandbox, tmp_path):
    def steps(sub):
        return [
            bash(f"echo 'tests/test_calc.py' > {sub}/test_files.txt && touch {sub}/test_weaken.diff"),
            submit("Done, I think."),
            bash(f"printf 'python -m pytest -rA\\n' > {sub}/test_script.sh"),
            submit("Now really done."),
        ]

    server = serve(make_by_turn(steps))
    out = tmp_path / "a2"
    result = run_llm_injection(sandbox, make_client(server), out_dir=out, strategy="direct",
                               config=AgentConfig(max_turns=10, command_timeout=30))
    assert not result.ok and result.artifact is None and result.exit_status == "submitted"
    assert result.error == ("submission incomplete: bug_inject.diff is missing; test_weaken.diff is empty; "
                            f"test_parser.py is missing (in the sandbox's {sandbox.scratch}/ssrkit_submission)")
    assert result.missing == ["bug_inject.diff", "test_weaken.diff", "test_parser.py"]
    traj = Trajectory.load(out / "trajectory.json")
    assert traj["exit_status"] == "submitted" and traj["error"] == result.error
    second_chance = traj["messages"][5]["content"]
    assert second_chance.startswith("Not submitted: bug_inject.diff is missing; test_weaken.diff is empty; "
                                    "test_script.sh is missing; test_parser.py is missing")
    assert sorted(p.name for p in out.iterdir()) == ["trajectory.json"]  # not an artifact


def test_a_run_that_never_submits_keeps_its_trajectory(serve, sandbox, tmp_path):
    server = serve(lambda messages, body: bash("git log --oneline"))
    result = run_llm_injection(sandbox, make_client(server), out_dir=tmp_path / "a3", strategy="history",
                               config=AgentConfig(max_turns=3))
    assert result.exit_status == "max_turns" and not result.ok
    assert "did not submit (max_turns)" in result.error
    assert len(Trajectory.load(tmp_path / "a3" / "trajectory.json")["turns"]) == 3


def test_unusable_endpoint_raises_after_saving(serve, sandbox, tmp_path):
    server = serve([], models=["other-model"])
    with pytest.raises(ModelError, match="does not serve model 'scripted-model'; it offers: other-model"):
        run_llm_injection(sandbox, make_client(server), out_dir=tmp_path / "a4", strategy="removal")
    assert Trajectory.load(tmp_path / "a4" / "trajectory.json")["exit_status"] == "error"


def test_existing_artifact_is_not_overwritten(sandbox, tmp_path, serve):
    (tmp_path / "a5").mkdir()
    (tmp_path / "a5" / "artifact.toml").write_text("id = 'x'\n")
    with pytest.raises(SsrkitError, match="already holds an artifact"):
        run_llm_injection(sandbox, make_client(serve([])), out_dir=tmp_path / "a5")


def test_strategy_is_sampled_from_the_mixture_and_recorded(serve, sandbox, tmp_path):
    rng = random.Random(0)
    picks = [choose_strategy(None, rng) for _ in range(400)]
    assert set(picks) == {"removal", "history"} and 150 < picks.count("removal") < 250
    assert {choose_strategy({"direct": 1.0, "removal": 0.0}, rng) for _ in range(20)} == {"direct"}
    with pytest.raises(SsrkitError, match="unknown injection strategy bogus"):
        choose_strategy({"bogus": 1}, rng)

    server = serve(lambda messages, body: bash("true"))
    mixture = {"history": 1.0, "direct": 1.0}
    seen = set()
    for seed in range(6):
        r = run_llm_injection(sandbox, make_client(server), out_dir=tmp_path / f"s{seed}", mixture=mixture,
                              seed=seed, config=AgentConfig(max_turns=1))
        traj = Trajectory.load(r.trajectory_path)
        assert traj["info"]["strategy"] == r.strategy and traj["info"]["strategy_mixture"] == mixture
        assert f"## Strategy: {r.strategy}" in traj["messages"][1]["content"]
        seen.add(r.strategy)
    assert seen == {"history", "direct"}


def test_prompts_carry_the_thresholds_and_the_rules():
    system, task = injector_prompts("history", submission_dir="/scratch/ssrkit_submission",
                                    **Settings(min_passing_tests=11, min_failing_tests=2,
                                               min_changed_files=3).thresholds(),
                                    test_timeout=90, command_timeout=120, max_turns=50)
    assert "at least\n   11 of them" in task and "at least 2 of those tests" in task
    assert "at least 3 code file(s)" in task and "git log" in task
    assert "/scratch/ssrkit_submission" in task and "absolute inside /scratch/ssrkit_submission" in system
    for rule in ("code only", "test files only", "Do not comment tests out", "Leave no trace",
                 "flaky", "restoring that file alone", "syntax"):
        assert rule in task, rule
    assert "{{" not in system + task
