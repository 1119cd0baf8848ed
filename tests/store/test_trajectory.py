"""The trajectory format has one reader, which checks the tag (#27 step 2.3): a trajectory.json without
`"format": "ssrkit.trajectory/1"` is not one ssrkit wrote, so the trainer's scan and the SFT export skip it
(they read any JSON before), and the example builder skips a file that broke after the scan (it raised)."""

from __future__ import annotations

import json

import pytest

from ssrkit.store import trajectory as trajectories
from ssrkit.store.trajectory import FORMAT, TrajectoryError

from fixtures.repos import finish_attempt

TAGGED = {"format": FORMAT, "role": "solver", "exit_status": "submitted",
          "messages": [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "done"}]}
TAGLESS = {k: v for k, v in TAGGED.items() if k != "format"}


def _artifact(tmp_path, trajectories_by_attempt):
    """An artifact whose attempts all passed, each with the given trajectory.json text."""
    (tmp_path / "bug_inject.diff").write_text("x")
    for name, text in trajectories_by_attempt.items():
        finish_attempt(tmp_path, name, {"passed": True})
        (tmp_path / "attempts" / name / "trajectory.json").write_text(text)
    return tmp_path


def test_the_reader_checks_the_tag(tmp_path):
    good, tagless, broken = tmp_path / "good.json", tmp_path / "tagless.json", tmp_path / "broken.json"
    good.write_text(json.dumps(TAGGED))
    tagless.write_text(json.dumps(TAGLESS))
    broken.write_text('{"format": "ssrkit.traj')
    assert trajectories.read(good) == TAGGED
    with pytest.raises(TrajectoryError, match=f"tagless.json: not an {FORMAT} file"):
        trajectories.read(tagless)
    with pytest.raises(TrajectoryError, match="cannot read the trajectory"):
        trajectories.read(broken)
    assert [trajectories.exit_status(p) for p in (good, tagless, broken)] == ["submitted", None, None]
    assert [trajectories.role(p) for p in (good, tagless, broken, tmp_path / "absent")] == ["solver", None, None, None]
    assert trajectories.ended(good) and not trajectories.ended(tagless)
    good.write_text(json.dumps({**TAGGED, "exit_status": trajectories.RUNNING}))
    assert not trajectories.ended(good)  # a run still going (or killed) has not ended


def test_trains_scan_skips_a_trajectory_without_the_tag(tmp_path):
    from ssrkit.train.rollouts import scan_artifact

    art = _artifact(tmp_path, {"001": json.dumps(TAGGED), "002": json.dumps(TAGLESS)})
    scan = scan_artifact(art, roles=("solver",))
    assert [r.trajectory.parent.name for r in scan.rollouts] == ["001"]
    assert [reason for reason, n in scan.skipped.items() if n] == [
        f"unreadable trajectory.json (or not an {FORMAT} file)"]


def test_the_sft_export_skips_a_trajectory_without_the_tag(tmp_path):
    from ssrkit.runs.export import sft_examples
    from ssrkit.store.artifact import Artifact

    art = _artifact(tmp_path, {"001": json.dumps(TAGLESS), "002": json.dumps(TAGGED)})
    assert [(e["attempt"], e["messages"]) for e in sft_examples(Artifact(art))] == [("002", TAGGED["messages"])]


def test_the_example_builder_skips_a_trajectory_that_broke_after_the_scan(tmp_path, caplog):
    from ssrkit.train.examples import build_examples
    from ssrkit.train.rollouts import Rollout

    broken = tmp_path / "trajectory.json"
    broken.write_text('{"format": ')  # e.g. rewritten by a solve still running
    rollout = Rollout("solver", broken, tmp_path, "solver:a", 1.0, "submitted")
    examples, stats = build_examples([(rollout, 1.0)], tokenizer=None, max_length=16)
    assert examples == [] and stats.trajectories == 0
    assert "cannot read the trajectory" in caplog.text
