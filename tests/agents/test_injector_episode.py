"""ssrkit.env's InjectorEpisode: the LLM injector's run driven reply by reply; its reward settled for the group
by `injector_group_rewards` once solver episodes (recorded as attempts) have tried the artifact."""

from __future__ import annotations

import pytest

from fixtures.agents import tiny_injector_steps
from fixtures.scripted_server import edit, submit
from fixtures.solving import SANDBOX
from ssrkit.env import InjectorEpisode, SolverEpisode, injector_group_rewards
from ssrkit.errors import SsrkitError
from ssrkit.sandbox import _cleanup
from ssrkit.solve import Engine, SolveOptions
from ssrkit.store.source import RepoSource
from ssrkit.validate import Settings, Validator
from ssrkit.verdict.rewards import injector_reward


def injection(repo, out):
    return InjectorEpisode(RepoSource.local(repo), out, strategy="removal", seed=0, backend="local", options=SANDBOX,
                           validator=Validator(Settings(cache=False), backend="local", options=SANDBOX))


def test_a_valid_injection_is_pending_until_its_solve_attempts_settle_it(tiny_repo, tmp_path):
    live = len(_cleanup._live)
    with injection(tiny_repo, tmp_path / "inj") as ep:
        messages = ep.reset()
        assert ep.submission_dir in messages[1]["content"]
        for reply in tiny_injector_steps(ep.submission_dir):
            r = ep.step(reply)
        assert r.done and r.reward is None and r.info["valid"] and r.info["exit_status"] == "submitted"
    assert len(_cleanup._live) == live
    with pytest.raises(SsrkitError, match="no finished solver attempt yet"):
        injector_group_rewards([r.info])
    # two solver episodes on the new artifact, recorded: one fixes clamp, one gives up
    engine = Engine(SolveOptions(backend="local", sandbox=SANDBOX))
    with SolverEpisode(r.info["artifact"], engine=engine, record=True) as fixer:
        fixer.reset()
        fixer.step(edit("calc.py", "    if x < lo:\n        return lo\n",
                        "    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n"))
        assert fixer.step(submit()).reward == 1.0
    with SolverEpisode(r.info["artifact"], engine=engine, record=True) as quitter:
        quitter.reset()
        assert quitter.step(submit()).reward == -1.0
    assert injector_group_rewards([r.info]) == [injector_reward(True, 0.5)]
    assert injector_group_rewards([r.info], {r.info["artifact"]: [True, True]}) == [injector_reward(True, 1.0)]


def test_the_prompt_states_the_thresholds_the_validator_enforces(tiny_repo, tmp_path):
    strict = Validator(Settings(cache=False, min_passing_tests=11, min_failing_tests=2), backend="local",
                       options=SANDBOX)
    with InjectorEpisode(RepoSource.local(tiny_repo), tmp_path / "inj", strategy="removal", seed=0,
                         backend="local", options=SANDBOX, validator=strict) as ep:
        task = ep.reset()[1]["content"]
    assert "at least\n   11 of them" in task and "at least 2 of those tests" in task


def test_an_injection_without_its_files_gets_minus_one_at_once(tiny_repo, tmp_path):
    with injection(tiny_repo, tmp_path / "inj") as ep:
        ep.reset()
        assert "Not submitted" in ep.step(submit()).messages[0]["content"]
        r = ep.step(submit())
    assert r.done and r.reward == -1.0 and not r.info["valid"] and "submission incomplete" in r.info["error"]
    assert injector_group_rewards([r.info]) == [-1.0]
