"""Advantages by role, against values computed by hand."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ssrkit.train.advantages import AdvantageOptions, compute_advantages, group_advantages, summarize

pytestmark = [pytest.mark.train, pytest.mark.fast]


@dataclass
class R:
    role: str
    group: str
    reward: float
    exit_status: str = "submitted"


def approx(values):
    return [None if v is None else pytest.approx(v, abs=1e-6) for v in values]


def test_solver_group_mean_baseline():
    rollouts = [R("solver", "a", r) for r in (1, -1, -1, 1, -1)]
    result = compute_advantages(rollouts)
    assert result.advantages == approx([1.2, -0.8, -0.8, 1.2, -0.8])
    assert [g.status for g in result.groups] == ["kept"]


def test_leave_one_out_and_std_scaling():
    rewards = [1, -1, -1, 1, -1]
    assert group_advantages(rewards, leave_one_out=True) == approx([1.5, -1, -1, 1.5, -1])
    std = (4.8 / 5) ** 0.5
    assert group_advantages(rewards, std_scaling=True) == approx(
        [1.2 / std, -0.8 / std, -0.8 / std, 1.2 / std, -0.8 / std]
    )


def test_groups_are_per_artifact_and_per_snapshot():
    rollouts = [
        R("solver", "solver:a", 1),
        R("solver", "solver:a", -1),
        R("solver", "solver:b", 1),
        R("solver", "solver:b", 1),
        R("solver", "solver:b", -1),
        R("solver", "solver:b", 1),
        R("injector", "injector:/repo@c1", 0.1),
        R("injector", "injector:/repo@c1", -0.8),
    ]
    result = compute_advantages(rollouts)
    assert result.advantages == approx([1, -1, 0.5, 0.5, -1.5, 0.5, 0.45, -0.45])


def test_singleton_uses_role_mean_then_moving_baseline():
    rollouts = [
        R("injector", "s1", 0.1),
        R("injector", "s1", -0.8),
        R("injector", "s2", 0.44),  # alone on its snapshot
    ]
    role_mean = (0.1 - 0.8 + 0.44) / 3
    first = compute_advantages(rollouts)
    assert first.advantages == approx([0.45, -0.45, 0.44 - role_mean])
    assert first.baselines == {"injector": pytest.approx(role_mean)}
    assert [g.status for g in first.groups] == ["kept", "singleton_baseline"]

    carried = compute_advantages(rollouts, AdvantageOptions(baseline_momentum=0.9), {"injector": 0.0})
    assert carried.advantages[2] == pytest.approx(0.44)
    assert carried.baselines["injector"] == pytest.approx(0.9 * 0.0 + 0.1 * role_mean)

    dropped = compute_advantages(rollouts, AdvantageOptions(singleton="drop"))
    assert dropped.advantages[2] is None


def test_zero_variance_groups_are_dropped():
    rollouts = [R("solver", "a", -1)] * 3 + [R("solver", "b", 1), R("solver", "b", -1)]
    result = compute_advantages(rollouts)
    assert result.advantages == approx([None, None, None, 1, -1])
    assert [g.status for g in result.groups] == ["zero_variance", "kept"]
    kept = compute_advantages(rollouts, AdvantageOptions(drop_zero_variance=False))
    assert kept.advantages[:3] == approx([0, 0, 0])


def test_masked_statuses_count_in_the_mean_but_get_no_loss():
    rollouts = [
        R("solver", "a", 1, "max_turns"),
        R("solver", "a", -1),
        R("solver", "a", -1, "context_limit"),
        R("solver", "a", -1, "timeout"),
    ]
    result = compute_advantages(rollouts)
    assert result.advantages == approx([None, -0.5, None, None])
    assert result.reasons[0] == "masked status max_turns"


def test_dropped_statuses_leave_the_group():
    rollouts = [R("solver", "a", 1, "error"), R("solver", "a", -1), R("solver", "a", 1)]
    result = compute_advantages(rollouts)
    assert result.advantages == approx([None, -1, 1])
    assert result.reasons[0] == "dropped status error"
    assert result.groups[0].size == 2


def test_summary_reports_role_mix():
    rollouts = [
        R("solver", "a", 1),
        R("solver", "a", -1),
        R("solver", "b", -1),
        R("solver", "b", -1),
        R("injector", "s", 0.3),
    ]
    summary = summarize(rollouts, compute_advantages(rollouts))
    assert summary["solver"]["rollouts"] == 4 and summary["solver"]["trained"] == 2
    assert summary["solver"]["groups_zero_variance"] == 1
    assert summary["injector"]["singletons"] == 1
