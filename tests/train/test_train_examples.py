"""Rollouts on disk -> rows: stored token ids, the chat-template path, prefix breaks, truncation, rewards."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from fixtures.training import conversation, encode, make_trajectory, write_artifact
from fixtures.repos import write_reward_json
from ssrkit.train.errors import TrainError
from ssrkit.train.examples import Row, build_examples, rows_from_stored, rows_from_template, trajectory_rows, truncate
from ssrkit.train.rollouts import find_artifacts, read_rollouts  # noqa: E402

pytestmark = pytest.mark.train


def test_stored_ids_extend_one_row_and_mask_only_completions():
    turns = [
        {"prompt_token_ids": [1, 2, 3], "completion_token_ids": [4, 5], "logprobs": [-0.1, -0.2]},
        {"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7], "completion_token_ids": [8], "logprobs": None},
    ]
    (row,) = rows_from_stored(turns)
    assert row.input_ids == [1, 2, 3, 4, 5, 6, 7, 8]
    assert row.loss_mask == [0, 0, 0, 1, 1, 0, 0, 1]
    lp = row.sampler_logprobs
    assert lp[3:5] == [-0.1, -0.2] and all(math.isnan(v) for v in lp[:3] + lp[5:])


def test_a_broken_prefix_starts_a_new_row():
    turns = [
        {"prompt_token_ids": [1, 2], "completion_token_ids": [3], "logprobs": [-1.0]},
        {"prompt_token_ids": [1, 9, 3, 4], "completion_token_ids": [5], "logprobs": [-2.0]},
    ]
    rows = rows_from_stored(turns)
    assert [r.input_ids for r in rows] == [[1, 2, 3], [1, 9, 3, 4, 5]]
    assert [r.loss_mask for r in rows] == [[0, 0, 1], [0, 0, 0, 0, 1]]


def test_template_path_marks_assistant_spans(tiny_tok):
    msgs = conversation("gamma")
    (row,) = rows_from_template(msgs, tiny_tok)
    text = tiny_tok.decode(row.input_ids)
    assert text == tiny_tok.apply_chat_template(msgs, tokenize=False)
    trained = tiny_tok.decode([t for t, m in zip(row.input_ids, row.loss_mask) if m])
    assert trained == "".join(m["content"] + "<|im_end|>" for m in msgs if m["role"] == "assistant")


def test_stored_and_template_paths_agree(tiny_tok):
    msgs = conversation("delta")
    stored, how_s = trajectory_rows(make_trajectory(tiny_tok, msgs, stored=True), tiny_tok)
    rendered, how_t = trajectory_rows(make_trajectory(tiny_tok, msgs, stored=False), tiny_tok)
    assert (how_s, how_t) == ("stored", "template")
    assert len(stored) == len(rendered) == 1
    # identical, except that the rendered row also holds the newline the template puts after the last turn
    nl = encode(tiny_tok, "\n")
    assert rendered[0].input_ids == stored[0].input_ids + nl
    assert rendered[0].loss_mask == stored[0].loss_mask + [0]


def test_truncation_keeps_the_head():
    row = Row()
    row.add([1, 2, 3], trained=False)
    row.add([4, 5, 6], trained=True)
    assert truncate(row, 4) and row.input_ids == [1, 2, 3, 4] and row.loss_mask == [0, 0, 0, 1]
    assert not truncate(row, 4)


def test_rollouts_rewards_groups_and_examples(tmp_path, tiny_tok):
    write_artifact(
        tmp_path,
        "a",
        [
            (make_trajectory(tiny_tok, conversation("a0")), True),
            (make_trajectory(tiny_tok, conversation("a1"), stored=False), False),
            (make_trajectory(tiny_tok, conversation("a2"), exit_status="timeout"), False),
        ],
        injector=(make_trajectory(tiny_tok, conversation("ia", 1), role="injector"), 0.1),
        solver_rewards=[1.0, -1.0],
    )
    write_artifact(
        tmp_path, "b", [], injector=(make_trajectory(tiny_tok, conversation("ib", 1), role="injector"), -0.8)
    )
    write_artifact(
        tmp_path,
        "c",
        [],
        injector=(make_trajectory(tiny_tok, conversation("ic", 1), role="injector"), -1.0),
        commit="other",
    )
    # attempt 2 is not covered by solver_rewards: its reward comes from eval.json
    assert find_artifacts([tmp_path]) == sorted(p.resolve() for p in (tmp_path / "a", tmp_path / "b", tmp_path / "c"))
    scan = read_rollouts([tmp_path])
    got = sorted((r.role, r.group.split(":", 1)[0], r.reward, r.exit_status, r.source.name) for r in scan.rollouts)
    assert got == [
        ("injector", "injector", -1.0, "submitted", "c"),
        ("injector", "injector", -0.8, "submitted", "b"),
        ("injector", "injector", 0.1, "submitted", "a"),
        ("solver", "solver", -1.0, "submitted", "a"),
        ("solver", "solver", -1.0, "timeout", "a"),
        ("solver", "solver", 1.0, "submitted", "a"),
    ]
    groups = {r.source.name: r.group for r in scan.rollouts if r.role == "injector"}
    assert groups["a"] == groups["b"] == "injector:/repos/demo@c0ffee" != groups["c"]
    only_solver = read_rollouts([tmp_path / "a"], roles=["solver"])
    assert {r.role for r in only_solver.rollouts} == {"solver"}

    examples, stats = build_examples([(r, 0.5) for r in scan.rollouts], tiny_tok, max_length=40)
    assert stats.trajectories == 6 and stats.truncated_rows == 6
    assert all(len(e.input_ids) <= 40 for e in examples)
    assert stats.paths == {"stored": 5, "template": 1}


def test_no_artifacts_is_a_user_error(tmp_path):
    with pytest.raises(TrainError, match="no artifacts"):
        read_rollouts([tmp_path])
    with pytest.raises(TrainError, match="no such file"):
        read_rollouts([tmp_path / "missing"])


def test_attempt_without_eval_or_reward_is_skipped(tmp_path, tiny_tok):
    art = write_artifact(tmp_path, "a", [(make_trajectory(tiny_tok, conversation("x")), True)], solver_rewards=[])
    (art / "attempts" / "000" / "eval.json").unlink()
    scan = read_rollouts([art])
    assert scan.rollouts == [] and scan.skipped["unfinished attempt (no eval.json): no reward"] == 1
    json.loads((art / "reward.json").read_text())


def test_rewards_pair_with_attempts_by_name_not_position(tmp_path, tiny_tok):
    """An unfinished attempt first: reward.json lists only the finished ones, by name (what `ssrkit reward`
    writes); pairing by folder position would train the unfinished attempt and give the failed one +1."""
    trajectories = [(make_trajectory(tiny_tok, conversation(f"n{i}")), passed) for i, passed in
                    enumerate([False, False, True])]
    art = write_artifact(tmp_path, "a", trajectories)
    (art / "attempts" / "000" / "eval.json").unlink()  # interrupted: trajectory but no verdict
    write_reward_json(art, {
        "valid": True, "n_attempts": 2, "n_solved": 1, "solve_rate": 0.5, "alpha": 0.8, "injector_reward": 0.1,
        "solver_rewards": [-1.0, 1.0], "attempts": ["001", "002"]})
    scan = read_rollouts([art], roles=["solver"])
    got = {Path(r.trajectory).parent.name: r.reward for r in scan.rollouts}
    assert got == {"001": -1.0, "002": 1.0}
    assert scan.skipped["unfinished attempt (no eval.json): no reward"] == 1

    from ssrkit.store.attempts import scored_attempts

    scored = scored_attempts(art)
    assert [(s.name, s.reward, s.source) for s in scored] == [
        ("000", None, "unfinished"), ("001", -1.0, "reward.json"), ("002", 1.0, "reward.json")]
    # a record without names (older ssrkit) pairs with the finished attempts by position, only if counts agree
    (art / "reward.json").write_text(json.dumps({"valid": True, "solver_rewards": [-1.0, 1.0]}))
    assert [s.reward for s in scored_attempts(art)] == [None, -1.0, 1.0]


@pytest.mark.parametrize(
    "sampling, meaning, kept",
    [
        ({"temperature": 1.0, "top_p": 1.0}, None, True),  # raw == processed at T = 1
        ({"temperature": 0.7, "top_p": 1.0}, {"mode": "processed"}, True),
        ({"temperature": 0.7, "top_p": 1.0}, {"mode": "raw"}, False),
        ({"temperature": 0.7, "top_p": 1.0}, None, False),  # unknown meaning at T != 1
        ({"temperature": 1.0, "top_p": 0.9}, {"mode": "processed"}, False),  # nucleus-renormalised
    ],
)
def test_sampler_logprobs_are_used_only_when_comparable(tiny_tok, sampling, meaning, kept):
    from ssrkit.train.examples import sampler_logprobs_reason
    from ssrkit.train.loop import needs_initial_logprobs
    from ssrkit.train.config import TrainConfig
    from ssrkit.train.rollouts import Rollout

    trajectory = make_trajectory(tiny_tok, conversation("lp"))
    for turn in trajectory["turns"]:
        turn["logprobs"] = [-0.5] * len(turn["completion_token_ids"])
    trajectory["sampling"] = {**trajectory["sampling"], **sampling}
    if meaning is not None:
        trajectory["logprobs"] = {**meaning, **sampling}
    assert (sampler_logprobs_reason(trajectory) is None) == kept
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "trajectory.json"
        path.write_text(json.dumps(trajectory))
        rollout = Rollout("solver", path, Path(d), "g", 1.0, "submitted")
        examples, stats = build_examples([(rollout, 1.0)], tiny_tok, max_length=4096)
    assert stats.trained_tokens_by_path == {"stored": stats.trained_tokens}
    assert (stats.with_logprobs == stats.trained_tokens) == kept
    assert bool(stats.logprobs_dropped) == (not kept)
    # when they are not used, the old policy is the initial checkpoint's, even for a single epoch
    assert needs_initial_logprobs(TrainConfig(epochs=1), examples) == (not kept)
