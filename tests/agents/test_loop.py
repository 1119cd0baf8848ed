"""The agent loop against a real server and a real subprocess sandbox."""

from __future__ import annotations

import json
import time

import pytest

from fixtures.scripted_server import bash, create, edit, render_prompt, submit, toy_tokens
from ssrkit.agents import Agent, AgentConfig, FormatError, ModelClient, ModelError, Trajectory, parse_tool_call
from ssrkit.agents.tools import ToolError, apply_blocks, truncate
from ssrkit.errors import SsrkitError

pytestmark = pytest.mark.fast


def run(server, sandbox, tmp_path, config=None, *, want_token_ids=False, task="Do the task.", **kw):
    client = ModelClient(server.base_url, "scripted-model", want_token_ids=want_token_ids, backoff_s=0.01,
                         max_backoff_s=0.02)
    config = config or AgentConfig(max_turns=10, command_timeout=10)
    traj = Trajectory("solver", model=client.describe(), limits=config.to_dict(), path=tmp_path / "t.json")
    Agent(client, sandbox, config, **kw).run(traj, "You are a test agent.", task)
    on_disk = json.loads((tmp_path / "t.json").read_text())
    assert on_disk == traj.data  # the file is the state
    return traj


def observations(traj):
    return [m["content"] for m in traj.messages[2:] if m["role"] == "user"]


# -- parsing ----------------------------------------------------------------------------------------

def test_parse_the_four_tools():
    assert parse_tool_call("I'll look.\n<tool: bash>\nls -la\n</tool>").body == "ls -la"
    c = parse_tool_call('<tool: create path="a/b.py">\nx = 1\n</tool>')
    assert (c.name, c.path, c.body) == ("create", "a/b.py", "x = 1")
    c = parse_tool_call(edit("f.py", "a\nb", "c"))
    assert c.blocks == [("a\nb", "c")]
    assert parse_tool_call("<tool: submit>\n</tool>").name == "submit"
    assert parse_tool_call("<tool: submit/>").name == "submit"
    assert parse_tool_call("Let me check. <tool: bash>\npwd\n</tool>").body == "pwd"
    # a stop sequence at </tool> drops the closing tag: still one call
    assert parse_tool_call("<tool: bash>\necho hi\n", "stop").body == "echo hi"
    # a closing tag inside the body (a file about tool tags) does not end the call early
    body = parse_tool_call('<tool: create path="t.md">\nuse </tool> to close\n</tool>').body
    assert body == "use </tool> to close"


@pytest.mark.parametrize("text, message", [
    ("I think I should run ls.", "no tool call"),
    ("<tool: bash>\nls\n</tool>\n<tool: bash>\npwd\n</tool>", "2 tool calls"),
    ("<tool: python>\nprint(1)\n</tool>", "no tool 'python'"),
    ("Run <tool: bash>ls</tool> now", "must end its line"),
    ("<tool: edit>\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n</tool>", "needs the file"),
    ('<tool: edit path="f">\n<<<<<<< SEARCH\na\n=======\nb\n</tool>', "REPLACE` is missing"),
    ('<tool: edit path="f">\nreplace a with b\n</tool>', "outside a SEARCH/REPLACE block"),
    ("<tool: bash>\n\n</tool>", "empty"),
])
def test_malformed_calls_get_a_helpful_message(text, message):
    with pytest.raises(FormatError, match=message):
        parse_tool_call(text)


def test_cut_off_replies_are_reported_as_such():
    with pytest.raises(FormatError, match="cut off"):
        parse_tool_call("<tool: bash>\nfor i in", "length")


def test_edit_blocks():
    text = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"
    assert apply_blocks(text, [("def f():\n    return 1", "def f():\n    return 2")], "m.py") == \
        text.replace("return 1", "return 2", 1)
    assert apply_blocks(text, [("def g():\n    return 1", "")], "m.py") == "def f():\n    return 1\n\n\n"
    with pytest.raises(ToolError, match="occurs 2 times"):
        apply_blocks(text, [("    return 1", "    return 3")], "m.py")
    with pytest.raises(ToolError, match="matches line 1 if whitespace is ignored"):
        apply_blocks(text, [("def f():\n  return 1", "x")], "m.py")
    with pytest.raises(ToolError, match="does not occur in m.py"):
        apply_blocks(text, [("def h():", "x")], "m.py")
    assert apply_blocks("a\r\nb\r\n", [("a\nb", "c\nd")], "w.txt") == "c\r\nd\r\n"


def test_truncate_keeps_head_and_tail():
    out = truncate("A" * 100 + "B" * 100, 50)
    assert out.startswith("A" * 25) and out.endswith("B" * 25) and "150 characters cut" in out


def test_config_from_toml_section():
    cfg = AgentConfig.from_dict({"max_turns": 7, "context_tokens": 0, "wall_clock_s": 60})
    assert (cfg.max_turns, cfg.context_tokens, cfg.wall_clock_s) == (7, None, 60.0)
    with pytest.raises(SsrkitError, match="unknown setting 'max_turn'"):
        AgentConfig.from_dict({"max_turn": 3})
    with pytest.raises(SsrkitError, match="non-negative"):
        AgentConfig.from_dict({"command_timeout": -1})


# -- whole runs --------------------------------------------------------------------------------------

def test_tools_work_in_the_sandbox_and_submit_ends_the_run(serve, sandbox, tmp_path):
    server = serve([
        bash("cat calc.py | head -3"),
        edit("calc.py", "def add(a, b):\n    return a + b", "def add(a, b):\n    return b + a"),
        create("pkg/new.py", "VALUE = 42"),
        bash("python -c 'import pkg.new as n; print(n.VALUE)'"),
        submit(),
    ])
    traj = run(server, sandbox, tmp_path)
    assert traj.exit_status == "submitted" and traj.error is None
    assert traj.data["submission"] == {"turn": 5}
    obs = observations(traj)
    assert obs[0].startswith("exit code 0\n<output>\n\"\"\"A tiny calculator.\"\"\"")
    assert obs[1].startswith("Edited calc.py") and obs[2].startswith("Created pkg/new.py (1 line)")
    assert "42" in obs[3]
    assert "[budget: turn 1/10, 9 left; context" in obs[0]
    assert "return b + a" in sandbox.read_file("calc.py").decode()
    assert [t["message_index"] for t in traj.turns] == [2, 4, 6, 8, 10]
    assert all(traj.messages[t["message_index"]]["role"] == "assistant" for t in traj.turns)
    assert traj.data["ended"] and traj.data["seconds"] > 0


def test_tool_errors_are_reported_and_the_run_goes_on(serve, sandbox, tmp_path):
    server = serve([
        edit("calc.py", "def nope():", "x"),
        edit("../outside.py", "a", "b"),
        create("/etc/evil", "x"),
        create(".git/config", "x"),
        edit("missing.py", "a", "b"),
        create("tests", "x"),
        submit(),
    ])
    traj = run(server, sandbox, tmp_path)
    obs = observations(traj)
    assert "does not occur in calc.py" in obs[0]
    assert "escapes the repository" in obs[1]
    assert "absolute paths are not allowed" in obs[2]
    assert "inside .git" in obs[3]
    assert "missing.py does not exist; use create" in obs[4]
    assert "cannot read tests: Is a directory" in obs[5]
    assert traj.exit_status == "submitted"


def test_model_that_never_submits_stops_at_max_turns(serve, sandbox, tmp_path):
    server = serve(lambda messages, body: bash("echo still working"))
    traj = run(server, sandbox, tmp_path, AgentConfig(max_turns=4, command_timeout=10))
    assert traj.exit_status == "max_turns" and len(traj.turns) == 4
    assert "Submit now if you are done" in observations(traj)[-1]
    assert len(server.chat_requests) == 4


def test_three_malformed_turns_end_the_run(serve, sandbox, tmp_path):
    server = serve(["let me think", "still thinking", "```bash\nls\n```", bash("ls")])
    traj = run(server, sandbox, tmp_path)
    assert traj.exit_status == "format_errors" and len(traj.turns) == 3
    assert "no tool call" in observations(traj)[0] and "<tool: bash>" in observations(traj)[0]


def test_one_malformed_turn_is_corrected_and_the_run_recovers(serve, sandbox, tmp_path):
    server = serve(["I will list files", bash("ls"), "oops", "again", submit()])
    traj = run(server, sandbox, tmp_path)
    assert traj.exit_status == "submitted"  # the counter resets after a good turn
    assert "calc.py" in observations(traj)[1]


def test_hung_command_is_killed_and_the_loop_goes_on(serve, sandbox, tmp_path):
    server = serve([bash("echo started; sleep 60; echo never"), bash("echo after"), submit()])
    t0 = time.monotonic()
    traj = run(server, sandbox, tmp_path, AgentConfig(command_timeout=1))
    assert time.monotonic() - t0 < 15
    obs = observations(traj)
    assert "timed out after 1 s and was killed" in obs[0] and "started" in obs[0] and "never" not in obs[0]
    assert "after" in obs[1] and traj.exit_status == "submitted"


def test_long_output_is_truncated(serve, sandbox, tmp_path):
    server = serve([bash("seq 1 100000"), submit()])
    traj = run(server, sandbox, tmp_path, AgentConfig(output_chars=200))
    obs = observations(traj)[0]
    assert obs.startswith("exit code 0\n<output>\n1\n2\n") and "100000\n</output>" in obs
    assert "characters cut" in obs and len(obs) < 500


def test_context_budget_stops_the_run(serve, sandbox, tmp_path):
    server = serve(lambda messages, body: bash("echo hello"))
    traj = run(server, sandbox, tmp_path, AgentConfig(context_tokens=1500, max_turns=50))
    assert traj.exit_status == "context_limit"
    totals = [t["usage"]["total_tokens"] for t in traj.turns]
    assert totals[-2] < 1500 <= totals[-1] + len(traj.messages[-1]["content"]) // 4


def test_server_side_context_overflow_is_a_context_limit(serve, sandbox, tmp_path):
    server = serve([bash("ls"), {"status": 400, "error": "This model's maximum context length is 8 tokens"}])
    traj = run(server, sandbox, tmp_path)
    assert traj.exit_status == "context_limit" and "maximum context length" in traj.error


def test_wall_clock_budget(serve, sandbox, tmp_path):
    server = serve(lambda messages, body: bash("sleep 5"))
    t0 = time.monotonic()
    traj = run(server, sandbox, tmp_path, AgentConfig(wall_clock_s=1.5, command_timeout=30))
    assert traj.exit_status == "timeout" and time.monotonic() - t0 < 10


def test_unusable_endpoint_is_recorded_then_raised(serve, sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    server = serve([bash("ls")], api_key="sk-right")
    with pytest.raises(ModelError, match="rejected the API key"):
        run(server, sandbox, tmp_path)
    data = Trajectory.load(tmp_path / "t.json")
    assert data["exit_status"] == "error" and "rejected the API key" in data["error"]
    assert "sk-wrong" not in (tmp_path / "t.json").read_text()


def test_a_broken_sandbox_is_an_error_status(serve, sandbox, tmp_path):
    server = serve([bash("ls")])

    def broken(*a, **kw):
        raise OSError("the container is gone")

    sandbox.run = broken
    traj = run(server, sandbox, tmp_path)
    assert traj.exit_status == "error" and "the container is gone" in traj.error


def test_token_ids_and_logprobs_land_in_the_trajectory(serve, sandbox, tmp_path):
    server = serve([bash("echo hi"), submit()], token_ids="vllm")
    traj = run(server, sandbox, tmp_path, want_token_ids=True)
    for turn in traj.turns:
        shown = traj.messages[:turn["message_index"]]
        assert turn["prompt_token_ids"] == toy_tokens(render_prompt(shown))
        assert turn["completion_token_ids"] == toy_tokens(traj.messages[turn["message_index"]]["content"])
        assert len(turn["logprobs"]) == len(turn["completion_token_ids"])
        assert turn["finish_reason"] == "stop" and turn["usage"]["total_tokens"] > 0


def test_api_key_never_reaches_the_sandbox_or_the_trajectory(serve, sandbox, tmp_path, monkeypatch):
    key = "sk-live-do-not-leak-777"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    server = serve([bash("env; echo $OPENAI_API_KEY"), submit()], api_key=key)
    traj = run(server, sandbox, tmp_path)
    assert traj.exit_status == "submitted"
    assert key not in (tmp_path / "t.json").read_text()
    assert all(key not in r["raw"] for r in server.requests)
