"""`ssrkit train --follow RUN` on the tiny model (issue #28 item 2): complete groups are trained as they land,
in the direction of their advantages; stale rollouts get no loss and are counted; a crash at any point of a step
neither loses nor repeats a rollout, and the version sequence continues."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from fixtures.training import conversation, make_trajectory, row_logprob_sums, write_artifact  # noqa: E402

from ssrkit.store import follow as store  # noqa: E402
from ssrkit.store.policy import read_version, root_version, write_version  # noqa: E402
from ssrkit.train.config import TrainConfig  # noqa: E402

pytestmark = pytest.mark.train


@pytest.fixture
def base(tmp_path, tiny_model_dir):
    """A copy of the tiny model as step 0 of a lineage (what the servers of the run serve first)."""
    path = tmp_path / "base"
    shutil.copytree(tiny_model_dir, path)
    write_version(path, root_version())
    return path


def group(run, name, tok, version, letters, passed=(True, False), round_=1):
    """An artifact of `round_` whose attempts were sampled by `version` (a dict, or None: unknown)."""
    attempts = []
    for k, ok in enumerate(passed):
        traj = make_trajectory(tok, conversation(f"{name}{k}", 2, letters[k]))
        for turn in traj["turns"]:
            turn["policy"] = version
        attempts.append((traj, ok))
    return write_artifact(run / f"round-{round_:03d}" / "tasks" / "demo", name, attempts)


def config(base, run, **kw):
    return TrainConfig(**{"model": str(base), "follow": str(run), "lr": 3e-3, "groups_per_step": 1, "poll": 0.05,
                          "exit_when_idle": 0.3, "grad_accum": 1, **kw})


def ledger_ids(run):
    lines = store.read_ledger(run)
    trained = [t["id"] for line in lines for t in line["trained"]]
    dropped = [d["id"] for line in lines for d in line["dropped"]]
    return lines, trained, dropped


def all_ids(run):
    from ssrkit.train.stream import rollout_id

    return {rollout_id(p) for p in run.glob("round-*/tasks/*/*/attempts/*/trajectory.json")}


def test_steps_move_the_policy_the_right_way_and_stale_rollouts_get_no_loss(tmp_path, base, tiny_tok):
    from ssrkit.train.advantages import compute_advantages
    from ssrkit.train.examples import build_examples
    from ssrkit.train.follow import follow
    from ssrkit.train.rollouts import read_rollouts

    run, v0 = tmp_path / "run", read_version(base).turn()
    group(run, "alpha", tiny_tok, v0, ["AB", "CD"])
    summary = follow(config(base, run, max_steps=1), run)
    assert summary["step"] == 1
    v1 = read_version(store.step_dir(run, 1))
    assert (v1.step, v1.parent) == (1, v0["id"])
    group(run, "beta", tiny_tok, v1.turn(), ["EF", "GH"])  # sampled by step 1: fresh
    group(run, "gamma", tiny_tok, v0, ["IJ", "KL"])  # sampled by step 0: 1 step old at step 1 > max 0
    summary = follow(config(base, run, max_staleness=0, groups_per_step=2), run)
    assert summary["step"] == 2 and "no complete group" in summary["stopped"]

    lines, trained, dropped = ledger_ids(run)
    assert [line["step"] for line in lines] == [1, 2]
    assert len(trained) == len(set(trained)) == 4 and set(trained) | set(dropped) == all_ids(run)
    stale = [d for line in lines for d in line["dropped"] if d["reason"] == "stale"]
    assert len(stale) == 2 and {d["staleness"] for d in stale} == {1} and all("gamma" in d["path"] for d in stale)
    steps = store.read_steps_log(run)
    assert [r["step"] for r in steps] == [1, 2] and steps[1]["dropped"]["stale"] == 2
    assert steps[1]["staleness"] == {"0": 2} and steps[0]["staleness"] == {"0": 2}

    # the direction: step 1 raised the passing attempt of alpha and lowered the failing one
    scan = read_rollouts([run / "round-001" / "tasks" / "demo" / "alpha"])
    advs = compute_advantages(scan.rollouts).advantages
    examples, _ = build_examples(list(zip(scan.rollouts, advs)), tiny_tok, 4096)
    before, after = row_logprob_sums(base, examples), row_logprob_sums(store.step_dir(run, 1), examples)
    assert all((a - b) * e.advantage > 0 for e, b, a in zip(examples, before, after)), (before, after)


def test_drops_before_a_restart_are_counted_by_the_next_step_and_the_report(tmp_path, base, tiny_tok):
    """A stale group alone makes a drop-only ledger line; the follower stops before the next step. The same command
    again counts those drops in the next step's metrics, and the report's totals count them from the ledger (CI
    stop 33 lost them when the trainer was killed between the two)."""
    from ssrkit.runs.report import continuous_summary
    from ssrkit.train.follow import follow

    run, v0 = tmp_path / "run", read_version(base).turn()
    group(run, "alpha", tiny_tok, v0, ["AB", "CD"])
    follow(config(base, run, max_steps=1), run)
    group(run, "gamma", tiny_tok, v0, ["IJ", "KL"])  # 1 step old > max 0: dropped, nothing to train
    summary = follow(config(base, run, max_staleness=0), run)
    assert summary["step"] == 1 and [len(line["trained"]) for line in store.read_ledger(run)] == [2, 0]
    assert continuous_summary(run)["totals"]["dropped"]["stale"] == 2  # before any step reports them
    group(run, "beta", tiny_tok, read_version(store.step_dir(run, 1)).turn(), ["EF", "GH"])
    follow(config(base, run, max_staleness=0), run)  # a new process: the drops are only in the ledger
    steps = store.read_steps_log(run)
    assert [r["step"] for r in steps] == [1, 2] and steps[1]["dropped"]["stale"] == 2
    assert continuous_summary(run)["totals"]["dropped"]["stale"] == 2


@pytest.mark.parametrize("event", ["saved", "ledger_appended", "committed"])
def test_a_crash_at_each_point_of_a_step_neither_loses_nor_repeats_a_rollout(tmp_path, base, tiny_tok, event):
    from ssrkit.train.follow import follow

    run, v0 = tmp_path / "run", read_version(base).turn()
    for name, letters in (("alpha", ["AB", "CD"]), ("beta", ["EF", "GH"])):
        group(run, name, tiny_tok, v0, letters)

    def crash(name, step):
        if name == event and step == 1:
            raise KeyboardInterrupt("killed")

    with pytest.raises(KeyboardInterrupt):
        follow(config(base, run), run, on_event=crash)
    summary = follow(config(base, run), run)  # the same command again
    lines, trained, dropped = ledger_ids(run)
    assert [line["step"] for line in lines] == [1, 2] == [r["step"] for r in store.read_steps_log(run)]
    assert len(trained) == len(set(trained)) == 4 and set(trained) == all_ids(run) and not dropped
    assert not list(store.checkpoints_dir(run).glob(".*partial")) and summary["step"] == 2
    ids = [read_version(store.step_dir(run, n)).id for n in (1, 2)]
    assert [line["policy_id"] for line in lines] == ids and read_version(store.step_dir(run, 2)).parent == ids[0]


def test_user_errors_and_a_second_follower(tmp_path, base, tiny_model_dir):
    from ssrkit.train.follow import follow

    env = {"PYTHONPATH": str(__import__("pathlib").Path(__file__).parents[2] / "src")}
    proc = subprocess.run([sys.executable, "-m", "ssrkit.train", "arts", "--follow", str(tmp_path), "--model", str(base)],
                          capture_output=True, text=True, env={**__import__("os").environ, **env})
    assert proc.returncode == 2 and "drop the ARTIFACTS" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(Exception, match="no such run directory"):
        follow(config(base, tmp_path / "missing"), tmp_path / "missing")
    held = store.lock(tmp_path)
    try:
        with pytest.raises(Exception, match=r"another `train --follow` \(pid \d+\)"):
            store.lock(tmp_path)
    finally:
        held.close()
    store.write_state(tmp_path, {"model": "/elsewhere/model"})
    store.adopt_root(tmp_path, base)
    with pytest.raises(Exception, match="followed from --model /elsewhere/model"):
        follow(config(base, tmp_path), tmp_path)
    assert json.loads((tmp_path / "follow" / "follow.json").read_text())["model"] == "/elsewhere/model"


def test_an_injector_group_waits_for_its_record_and_current_rewards_then_trains_its_way(tmp_path, base, tiny_tok):
    """An injector group is one injection run's output directory (`injector:round-K/inject/<repo>`): held back
    while the run's record (inject.json) is missing, or while an injected artifact's reward.json is stale (the
    solve rate it was computed from has changed), even as solver groups beside it train; once complete it is
    trained once, in the direction of its advantages."""
    from fixtures.repos import finish_attempt, write_reward_json

    from ssrkit.store.runs import INJECT_SUMMARY
    from ssrkit.train.advantages import compute_advantages
    from ssrkit.train.examples import build_examples
    from ssrkit.train.follow import follow
    from ssrkit.train.rollouts import read_rollouts
    from ssrkit.train.stream import rollout_id

    run, v0 = tmp_path / "run", read_version(base).turn()
    inject = run / "round-001" / "inject" / "demo"

    def injection(name, letters, reward, passed):
        injector = make_trajectory(tiny_tok, conversation(f"inj-{name}", 2, letters[0]), role="injector")
        attempts = [(make_trajectory(tiny_tok, conversation(f"{name}{k}", 2, l)), ok)
                    for k, (l, ok) in enumerate(zip(letters[1:], passed))]
        for traj in [injector] + [t for t, _ in attempts]:
            for turn in traj["turns"]:
                turn["policy"] = v0
        return write_artifact(inject, name, attempts, injector=(injector, reward))

    alpha = injection("alpha", ["AB", "CD", "EF"], 0.1, (True, False))  # solve rate 1/2: 1 - 1.8 * 0.5
    beta = injection("beta", ["GH", "IJ", "KL"], -0.8, (True, True))  # solved always: -alpha
    injector_ids = {rollout_id(a / "trajectory.json") for a in (alpha, beta)}
    key = "injector:round-001/inject/demo"

    def settled():
        return {g for line in store.read_ledger(run) for g in line["groups"]}

    follow(config(base, run), run)  # every reward current, but no inject.json yet: the solver groups only
    assert settled() == {"round-001/inject/demo/alpha", "round-001/inject/demo/beta"}
    assert store.committed_steps(run)[-1] == 1  # alpha's group trained; beta's (zero variance) dropped
    (inject / INJECT_SUMMARY).write_text(json.dumps({"artifacts": []}))  # the injection run ended ...
    finish_attempt(beta, "002", {"passed": True, "reason": "ok", "tests": {}, "exit_code": 0})  # ... beta's reward: stale
    summary = follow(config(base, run), run)
    assert key not in settled() and summary["step"] == 1 and "no complete group" in summary["stopped"]
    write_reward_json(beta, {"valid": True, "n_attempts": 3, "n_solved": 3, "solve_rate": 1.0, "alpha": 0.8,
                             "injector_reward": -0.8, "solver_rewards": [1.0] * 3, "attempts": ["000", "001", "002"]})
    summary = follow(config(base, run), run)
    lines, trained, _ = ledger_ids(run)
    assert summary["step"] == 2 and lines[-1]["groups"] == [key] and lines[-1]["step"] == 2
    assert {t["id"] for t in lines[-1]["trained"]} == injector_ids
    assert len(trained) == len(set(trained)) and injector_ids <= set(trained)

    # the direction: step 2 trained only the injector rows, raising alpha's (0.1) and lowering beta's (-0.8)
    scan = read_rollouts([inject], roles=["injector"])
    advs = compute_advantages(scan.rollouts).advantages
    examples, _ = build_examples(list(zip(scan.rollouts, advs)), tiny_tok, 4096)
    assert len(examples) == 2 and sorted(e.advantage > 0 for e in examples) == [False, True]
    before, after = row_logprob_sums(store.step_dir(run, 1), examples), row_logprob_sums(store.step_dir(run, 2),
                                                                                           examples)
    assert all((a - b) * e.advantage > 0 for e, b, a in zip(examples, before, after)), (before, after)
