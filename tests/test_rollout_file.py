"""Rollout files (`ssrkit.rollout_file`): what is written reads back, and every bad line is one error naming
FILE:LINE and what to change."""

from __future__ import annotations

import json

import pytest

from ssrkit.rollout_file import (
    TRAJECTORY_FORMAT,
    RolloutFileError,
    read_rollouts,
    rollout_record,
    write_rollouts,
)

pytestmark = pytest.mark.fast


def trajectory(text: str = "hi", *, logprobs: bool = True) -> dict:
    return {
        "format": TRAJECTORY_FORMAT,
        "role": "solver",
        "exit_status": "submitted",
        "sampling": {"temperature": 1.0, "top_p": 1.0},
        "messages": [{"role": "user", "content": "say hi"}, {"role": "assistant", "content": text}],
        "turns": [{"message_index": 1, "prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 5],
                   "logprobs": [-0.5, -1.25] if logprobs else None}],
    }


def test_inline_and_file_trajectories_read_back(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "one.json").write_text(json.dumps(trajectory("from a file")))
    path = write_rollouts(tmp_path / "r.jsonl", [
        rollout_record(trajectory("inline"), role="echo", group=3, reward=1, info={"seed": 7}),
        rollout_record("t/one.json", role="solver", group="art-1", reward=-0.5),  # relative to the file's folder
    ])
    first, second = read_rollouts(path)
    assert (first.role, first.group, first.reward, first.exit_status) == ("echo", "3", 1.0, "submitted")
    assert first.where == f"{path}:1" and first.offset == 0 and first.trajectory == path.resolve()
    assert first.load()["messages"][1]["content"] == "inline"  # read again from its line
    assert (second.role, second.group, second.reward, second.offset) == ("solver", "art-1", -0.5, None)
    assert second.trajectory == tmp_path / "t" / "one.json"
    assert second.load()["messages"][1]["content"] == "from a file"


def test_blank_lines_are_skipped_and_offsets_stay_right(tmp_path):
    lines = [json.dumps(rollout_record(trajectory(f"t{i}"), role="x", group="g", reward=i)) for i in range(3)]
    path = tmp_path / "r.jsonl"
    path.write_text("\n" + lines[0] + "\r\n\n" + lines[1] + "\n" + lines[2])  # no newline at the end
    got = read_rollouts(path)
    assert [r.where.rsplit(":", 1)[1] for r in got] == ["2", "4", "5"]
    assert [r.load()["messages"][1]["content"] for r in got] == ["t0", "t1", "t2"]


def _bad(**change):
    record = {"trajectory": trajectory(), "role": "solver", "group": "g", "reward": 1.0}
    record.update(change)
    return {k: v for k, v in record.items() if v is not ...}


def _turn(**change):
    t = trajectory()
    t["turns"][0].update(change)
    return t


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    (_bad(reward=...), "missing reward (each line needs trajectory, role, group, reward)"),
    (_bad(rewards=1), "unknown key 'rewards' (known: trajectory, role, group, reward, info)"),
    (_bad(reward="1"), "reward must be a finite number, got '1'"),
    (_bad(reward=True), "reward must be a finite number"),
    (_bad(role=""), "role must be a non-empty string"),
    (_bad(group=None), "group must be a non-empty string or an integer"),
    (_bad(info=[1]), "info must be an object"),
    (_bad(trajectory=3), "trajectory must be a trajectory object or the path of a trajectory file"),
    (_bad(trajectory="missing.json"), "trajectory file"),
    (_bad(trajectory={**trajectory(), "format": "other/1"}), "the trajectory's format is 'other/1', not"),
    (_bad(trajectory={**trajectory(), "exit_status": None}), "the trajectory has no exit_status"),
    (_bad(trajectory={**trajectory(), "turns": {}}), "the trajectory's turns must be a list"),
    (_bad(trajectory=_turn(prompt_token_ids=[1, "2"])), "turns[0].prompt_token_ids must be a list of integer"),
    (_bad(trajectory=_turn(logprobs=[-1.0])), "turns[0].logprobs has 1 values for 2 completion tokens"),
    (_bad(trajectory=_turn(logprobs=["x", 1])), "turns[0].logprobs must be a list of numbers"),
    (_bad(trajectory=_turn(message_index=9)), "turns[0].message_index 9 does not point into messages (2)"),
])
def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path, line, message):
    good = json.dumps(rollout_record(trajectory(), role="solver", group="g", reward=1.0))
    bad = line if isinstance(line, str) else json.dumps(line)
    path = tmp_path / "r.jsonl"
    path.write_text(f"{good}\n\n{bad}\n{good}\n")
    with pytest.raises(RolloutFileError) as err:
        read_rollouts(path)
    text = str(err.value)
    assert text.startswith(f"{path}:3: ") and message in text and "\n" not in text, text


def test_a_bad_trajectory_file_is_named(tmp_path):
    (tmp_path / "t.json").write_text("{oops")
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"trajectory": "t.json", "role": "solver", "group": "g", "reward": 0}) + "\n")
    with pytest.raises(RolloutFileError, match=rf"^{path}:1: trajectory file {tmp_path / 't.json'} is not JSON"):
        read_rollouts(path)
    (tmp_path / "t.json").write_text(json.dumps({**trajectory(), "format": None}))
    with pytest.raises(RolloutFileError, match=rf"format is None, not 'ssrkit.trajectory/1' \({tmp_path / 't.json'}\)"):
        read_rollouts(path)


def test_empty_unreadable_and_nan_files(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(RolloutFileError, match="no rollouts in the file"):
        read_rollouts(tmp_path / "empty.jsonl")
    with pytest.raises(RolloutFileError, match="cannot read the rollout file"):
        read_rollouts(tmp_path / "nope.jsonl")
    (tmp_path / "nan.jsonl").write_text('{"trajectory": "x", "role": "r", "group": 1, "reward": NaN}\n')
    with pytest.raises(RolloutFileError, match="nan.jsonl:1: reward must be a finite number, got nan"):
        read_rollouts(tmp_path / "nan.jsonl")


def test_the_writer_refuses_what_the_reader_would():
    with pytest.raises(RolloutFileError, match="reward must be a finite number"):
        rollout_record(trajectory(), role="solver", group="g", reward=float("inf"))
    with pytest.raises(RolloutFileError, match="turns\\[0\\].logprobs has 1 values"):
        rollout_record(_turn(logprobs=[-1.0]), role="solver", group="g", reward=1)


def test_the_agent_trajectory_writes_the_format_the_reader_checks():
    from ssrkit.agents.trajectory import FORMAT, Trajectory

    written = Trajectory("solver", model={"model": "m"}, limits={}).data
    written["exit_status"] = "submitted"
    assert FORMAT == TRAJECTORY_FORMAT and rollout_record(written, role="solver", group="g", reward=1)
