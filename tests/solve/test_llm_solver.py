"""A full `llm` solver attempt end to end: a real OpenAI-compatible server (scripted), the agent loop in
the solver sandbox, the fix graded like any other."""

from __future__ import annotations

import json

from fixtures.scripted_server import ScriptedServer, bash, edit, submit
from ssrkit.agents import AgentConfig, ModelClient
from ssrkit.store.artifact import EVAL, FIX, TEST_OUTPUT
from ssrkit.store.attempts import attempt_dir
from ssrkit.solve.solvers import LLMSolver, make_solver


CLAMP = ("    if x > hi:\n        return x\n", "    if x > hi:\n        return hi\n")
MEDIAN = ("    return s[mid]\n\n", "    return (s[mid - 1] + s[mid]) / 2\n\n")
MEDIAN_LAST = ("        return s[mid]\n    return s[mid]", "        return s[mid]\n    return (s[mid - 1] + s[mid]) / 2")


def run(art, engine, turns, attempts):
    server = ScriptedServer(turns).start()
    try:
        solver = make_solver("llm", client=ModelClient(server.base_url, "scripted-model"),
                             agent=AgentConfig(max_turns=8, command_timeout=60))
        assert isinstance(solver, LLMSolver)
        return engine.solve([(art, art.metadata.repo)], solver, attempts=attempts), server
    finally:
        server.stop()


def test_llm_attempts_success_and_failure(engine, calc_artifact, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-never-stored")
    art = calc_artifact
    [ok], server = run(art, engine, [
        bash("git log --oneline; git status --short; ls"),
        edit("src/calc/ops.py", *CLAMP),
        edit("src/calc/ops.py", *MEDIAN_LAST),
        bash("python -m pytest -q tests 2>&1 | tail -2"),
        submit("Fixed clamp and median."),
    ], attempts=1)
    assert ok["passed"], ok["reason"]
    assert ok["solver"] == "llm" and ok["attempt"] == "001"
    assert ok["solver_info"]["exit_status"] == "submitted" and ok["solver_info"]["model"] == "scripted-model"
    d = attempt_dir(art, "001")
    assert {p.name for p in d.iterdir()} >= {FIX, EVAL, TEST_OUTPUT, "trajectory.json"}
    fix = (d / FIX).read_text()
    assert "+        return hi" in fix and "tests/" not in fix
    traj_text = (d / "trajectory.json").read_text()
    assert "sk-test-secret" not in traj_text
    traj = json.loads(traj_text)
    # the agent saw one fresh commit and a clean tree: no history, no bug diff
    observation = traj["messages"][3]["content"]
    assert "Initial commit" in observation and observation.count("\n") < 40
    assert "bug_inject" not in traj_text
    # the task is the reversed weakening: the removed tests come back as additions
    assert "+def test_clamp_high():" in traj["messages"][1]["content"]
    # the key never went over the wire in a body, only as the Authorization header
    assert all("sk-test" not in json.dumps(r["body"]) for r in server.requests)

    # attempts 2..3: a partial fix, then an agent that gives up without changing anything
    [partial, nothing], _ = run(art, engine, [
        edit("src/calc/ops.py", *CLAMP), submit(),
        bash("cat src/calc/ops.py"), submit("I could not find the bug."),
    ], attempts=3)
    assert [partial["attempt"], nothing["attempt"]] == ["002", "003"]
    assert not partial["passed"] and "1 of 2 FAIL_TO_PASS" in partial["reason"]
    assert not nothing["passed"] and (attempt_dir(art, "003") / FIX).read_text() == ""


def test_the_trajectory_counts_the_fix_that_is_graded_even_when_the_agent_committed_it(engine, calc_artifact):
    """The fix is computed once, by the engine (against the solver's starting state, not the repository's own
    HEAD): an agent that commits its change gets that change graded, and its trajectory's `fix_diff_bytes` is
    the size of that fix.diff (it was the uncommitted rest: 0)."""
    [record], _ = run(calc_artifact, engine, [
        edit("src/calc/ops.py", *CLAMP),
        edit("src/calc/ops.py", *MEDIAN_LAST),
        bash("git -c user.name=a -c user.email=a@a commit -qam 'fix clamp and median' && git status --short"),
        submit(),
    ], attempts=1)
    d = attempt_dir(calc_artifact, "001")
    fix = (d / FIX).read_bytes()
    assert b"+        return hi" in fix and record["passed"], record["reason"]
    traj = json.loads((d / "trajectory.json").read_text())
    assert traj["submission"]["fix_diff_bytes"] == len(fix)
