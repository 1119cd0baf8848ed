"""ssrkit.env in process: a solver episode on a real artifact, driven with scripted replies, graded for real."""

from __future__ import annotations

import json

import pytest

from fixtures.scripted_server import bash, edit, submit
from ssrkit.env import SolverEpisode
from ssrkit.errors import SsrkitError
from ssrkit.sandbox import _cleanup
from ssrkit.store.artifact import Artifact
from ssrkit.store.source import RepoSource

from fixtures.env_tier import FIX, INVALID
from fixtures.repos import EXAMPLES, copy_artifact



def episode(art, repo, engine, **kw):
    return SolverEpisode(art, RepoSource.local(repo), engine=engine, **kw)


def test_oracle_fix_earns_plus_one_and_the_sandbox_is_gone(slug, textkit_repo, engine):
    with episode(slug, textkit_repo, engine, record=True) as ep:
        first = ep.reset()
        assert [m["role"] for m in first] == ["system", "user"]
        assert "+def test_" in first[1]["content"]  # the task: the reversed weakening
        r = ep.step(bash("git log --oneline | wc -l; ls"))
        assert not r.done and r.reward is None
        [obs] = r.messages
        assert obs["role"] == "user" and "exit code 0" in obs["content"] and "[budget: turn 1/" in obs["content"]
        r = ep.step(edit("src/textkit/slug.py", *FIX))
        assert "Edited src/textkit/slug.py" in r.messages[0]["content"]
        r = ep.step(submit("fixed"))
        assert r.done and r.reward == 1.0 and r.messages == []
        assert r.info["passed"] and r.info["exit_status"] == "submitted"
        assert "+        if len(candidate) > max_length:" in r.info["fix"]
        assert ep._sandbox is None
    # record=True: an attempt like any other, which `ssrkit reward` counts
    rec = json.loads((slug.path / "attempts" / "001" / "eval.json").read_text())
    assert rec["passed"] and rec["solver"] == "env"
    assert json.loads((slug.path / "attempts" / "001" / "trajectory.json").read_text())["exit_status"] == "submitted"


def test_no_fix_earns_minus_one_and_format_errors_end_it(slug, textkit_repo, engine):
    from ssrkit.agents import AgentConfig

    ep = episode(slug, textkit_repo, engine, config=AgentConfig(max_format_errors=2))
    ep.reset()
    assert not ep.step("I think the bug is in slug.py").done
    r = ep.step("still no tool call", finish_reason="length")
    assert r.done and r.reward == -1.0 and r.info["exit_status"] == "format_errors" and not r.info["passed"]
    with pytest.raises(SsrkitError, match="is done; make a new one"):
        ep.step(submit())
    with pytest.raises(SsrkitError, match="single-use"):
        ep.reset()
    ep.close()
    ep.close()  # idempotent


def test_close_mid_episode_leaves_no_sandbox(slug, textkit_repo, engine):
    ep = episode(slug, textkit_repo, engine)
    with pytest.raises(SsrkitError, match="call reset"):
        ep.step(submit())
    ep.reset()
    sb = ep._sandbox
    assert id(sb) in _cleanup._live
    ep.step(bash("echo hi > note.txt"))
    ep.close()
    assert ep.done and ep.reward is None and ep._sandbox is None
    assert id(sb) not in _cleanup._live
    with pytest.raises(SsrkitError, match="closed"):
        ep.step(submit())


def test_an_unvalidated_or_invalid_artifact_is_refused_before_any_sandbox(textkit_repo, engine, tmp_path):
    raw = copy_artifact(EXAMPLES / "artifacts" / "textkit" / "valid-slug-truncate-off-by-one", tmp_path / "raw")
    with pytest.raises(SsrkitError, match="validate"):
        episode(Artifact(raw), textkit_repo, engine)
    with pytest.raises(SsrkitError, match="not a directory"):
        episode(tmp_path / "nope", textkit_repo, engine)


def test_the_skyrl_gym_adapter_runs_an_episode(slug, textkit_repo, monkeypatch):
    """SkyRL-gym's own `make` builds ssrkit's env from a dataset row's extras; the oracle fix earns +1."""
    import skyrl_gym

    from ssrkit.env import skyrl

    skyrl.register()
    env = skyrl_gym.make(skyrl.ENV_ID, env_config={}, extras={"artifact": str(slug.path), "repo": str(textkit_repo),
                                                              "max_turns": 4})
    try:
        messages, meta = env.init([{"role": "user", "content": "the dataset's prompt, replaced"}])
        assert [m["role"] for m in messages] == ["system", "user"] and meta["artifact"] == slug.id
        out = env.step(edit("src/textkit/slug.py", *FIX))
        assert not out["done"] and "Edited" in out["observations"][0]["content"]
        out = env.step(submit())
        assert out["done"] and out["reward"] == 1.0 and out["metadata"]["passed"]
    finally:
        env.close()
