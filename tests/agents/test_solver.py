"""The LLM solver's agent run end to end: the fix is whatever the agent changed in the sandbox (the engine
takes it, tests/solve/test_llm_solver.py)."""

from __future__ import annotations

from fixtures.scripted_server import bash, edit, submit
from ssrkit.agents import AgentConfig, ModelClient, Trajectory
from ssrkit.patch import touched_files
from ssrkit.solve.solvers import run_llm_solver, task_from_weaken_diff

BREAK = """python - <<'EOF'
import pathlib
code, tests = pathlib.Path('calc.py'), pathlib.Path('tests/test_calc.py')
code.write_text(code.read_text().replace('    if x > hi:\\n        return hi\\n', ''))
tests.write_text(tests.read_text().replace(
    'def test_clamp_high():\\n    assert clamp(50, 0, 10) == 10\\n\\n\\n', ''))
EOF"""


def prepare(sandbox) -> str:
    """The solver's starting state: bug + weakened tests, one fresh commit. Returns test_weaken.diff."""
    assert sandbox.run(BREAK, timeout=30).ok
    weaken = sandbox.run("git diff -- tests", timeout=30).output
    sandbox.fresh_history()
    return weaken


def client(server):
    return ModelClient(server.base_url, "scripted-model", backoff_s=0.01)


def test_solver_fix_is_the_sandbox_diff(serve, sandbox, tmp_path):
    task = task_from_weaken_diff(prepare(sandbox))
    assert "the current code does not pass these tests" in task and "+def test_clamp_high():" in task
    server = serve([
        bash("git log --oneline && cat calc.py"),
        edit("calc.py", "    if x < lo:\n        return lo\n", "    if x < lo:\n        return lo\n"
             "    if x > hi:\n        return hi\n"),
        bash("python -m pytest -q 2>&1 | tail -1"),
        submit(),
    ])
    out = tmp_path / "attempts" / "001"
    traj = run_llm_solver(sandbox, client(server), task, out, config=AgentConfig(max_turns=10))
    assert traj.exit_status == "submitted" and traj.data["role"] == "solver"
    fix = sandbox.diff()
    assert touched_files(fix) == ["calc.py"]
    assert "+    if x > hi:\n+        return hi\n" in fix
    assert not (out / "fix.diff").exists()  # the engine writes the fix it grades
    saved = Trajectory.load(out / "trajectory.json")
    assert saved["messages"][1]["content"] == task
    history = saved["messages"][3]["content"]
    assert "Initial commit" in history and "Fix clamp" not in history


def test_solver_that_changes_nothing_leaves_an_empty_diff(serve, sandbox, tmp_path):
    task = task_from_weaken_diff(prepare(sandbox))
    server = serve(lambda messages, body: bash("cat calc.py"))
    traj = run_llm_solver(sandbox, client(server), task, tmp_path, config=AgentConfig(max_turns=2))
    assert traj.exit_status == "max_turns" and sandbox.diff() == ""
