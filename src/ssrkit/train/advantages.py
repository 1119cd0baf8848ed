"""GRPO advantages by role: pure functions over (role, group, reward, exit status); no I/O, no torch.

- Solver attempts are compared with attempts on the same artifact, injector rollouts with injections of the same
  repository snapshot (the `group` key chosen by `rollouts.py`). Advantage = reward - group mean; optionally
  leave-one-out (mean of the *other* members) and/or divided by the group's standard deviation.
- A group of one has no peers: it is compared with a per-role moving baseline (an exponential moving average of
  that role's mean reward, carried from round to round), or dropped.
- Groups whose rewards are all equal carry no signal and are dropped.
- Trajectories cut by a limit (`mask_statuses`, e.g. max_turns, context_limit, timeout, error) still count in
  their group's mean but get no advantage (no loss); those in `drop_statuses` (e.g. a sandbox error: the reward
  says nothing about the model) are left out of the group altogether.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol, Sequence

from ssrkit.store.trajectory import DROP_STATUSES, LIMIT_STATUSES

EPS = 1e-8


class Scored(Protocol):
    role: str
    group: str
    reward: float
    exit_status: str


@dataclass
class AdvantageOptions:
    std_scaling: bool = False
    leave_one_out: bool = False
    drop_zero_variance: bool = True
    singleton: str = "baseline"  # "baseline" | "drop"
    baseline_momentum: float = 0.9
    mask_statuses: Sequence[str] = LIMIT_STATUSES
    drop_statuses: Sequence[str] = DROP_STATUSES


@dataclass
class GroupStat:
    role: str
    group: str
    size: int  # members counted in the mean
    trained: int  # members that get a loss
    mean: float
    std: float
    status: str  # "kept", "zero_variance", "singleton_baseline", "singleton_dropped", "all_masked"


@dataclass
class AdvantageResult:
    advantages: list[float | None]  # one per input rollout; None = no loss for it
    groups: list[GroupStat]
    baselines: dict[str, float]  # the per-role baselines after this batch (to carry to the next round)
    reasons: list[str] = field(default_factory=list)  # one per input: "trained" or why not


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation."""
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / n)


def group_advantages(rewards: Sequence[float], std_scaling: bool = False, leave_one_out: bool = False) -> list[float]:
    """Advantages of one group of at least two rewards.

    reward - mean, or with `leave_one_out` reward - mean(others) = n/(n-1) * (reward - mean); with `std_scaling`
    divided by the group's (population) standard deviation.
    """
    n = len(rewards)
    if n < 2:
        raise ValueError("a group needs at least two members")
    mean, std = mean_std(rewards)
    scale = n / (n - 1) if leave_one_out else 1.0
    advantages = [scale * (r - mean) for r in rewards]
    if std_scaling:
        advantages = [a / (std + EPS) for a in advantages]
    return advantages


def update_baseline(old: float | None, batch_mean: float, momentum: float) -> float:
    return batch_mean if old is None else momentum * old + (1.0 - momentum) * batch_mean


def compute_advantages(
    rollouts: Sequence[Scored], options: AdvantageOptions | None = None, baselines: dict[str, float] | None = None,
    masked: dict[int, str] | None = None,
) -> AdvantageResult:
    """Advantages for `rollouts` (any objects with role, group, reward, exit_status), in input order.

    `baselines` maps role -> moving baseline from earlier rounds; a role with none starts from its mean reward in
    this batch. The returned baselines are updated with this batch's per-role mean. `masked`: index -> reason of
    rollouts that get no loss but stay in their group's mean (`train --follow`'s stale ones).
    """
    masked = masked or {}
    options = options or AdvantageOptions()
    baselines = dict(baselines or {})
    n = len(rollouts)
    advantages: list[float | None] = [None] * n
    reasons = ["trained"] * n

    by_group: dict[tuple[str, str], list[int]] = defaultdict(list)
    role_rewards: dict[str, list[float]] = defaultdict(list)
    for i, r in enumerate(rollouts):
        if r.exit_status in options.drop_statuses:
            reasons[i] = f"dropped status {r.exit_status}"
            continue
        by_group[(r.role, r.group)].append(i)
        role_rewards[r.role].append(r.reward)
    role_means = {role: sum(v) / len(v) for role, v in role_rewards.items()}

    groups: list[GroupStat] = []
    for (role, group), members in by_group.items():
        rewards = [rollouts[i].reward for i in members]
        mean, std = mean_std(rewards)
        trainable = [i for i in members if rollouts[i].exit_status not in options.mask_statuses and i not in masked]
        for i in members:
            if i not in trainable:
                reasons[i] = masked.get(i) or f"masked status {rollouts[i].exit_status}"
        if len(members) == 1:
            if options.singleton == "drop":
                status, values = "singleton_dropped", None
            else:
                baseline = baselines.get(role, role_means[role])
                values = [rewards[0] - baseline]
                status = "singleton_baseline"
                if options.drop_zero_variance and abs(values[0]) < EPS:
                    status, values = "zero_variance", None
        elif options.drop_zero_variance and max(rewards) - min(rewards) < EPS:
            status, values = "zero_variance", None
        else:
            status = "kept"
            values = group_advantages(rewards, options.std_scaling, options.leave_one_out)
        if values is None:
            for i in members:
                if reasons[i] == "trained":
                    reasons[i] = status
        else:
            for i, value in zip(members, values):
                if i in trainable:
                    advantages[i] = value
            if not trainable:
                status = "all_masked"
        groups.append(
            GroupStat(role, group, len(members), len(trainable) if values is not None else 0, mean, std, status)
        )

    new_baselines = dict(baselines)
    for role, mean in role_means.items():
        new_baselines[role] = update_baseline(baselines.get(role), mean, options.baseline_momentum)
    return AdvantageResult(advantages, groups, new_baselines, reasons)


def summarize(rollouts: Sequence[Scored], result: AdvantageResult) -> dict[str, dict[str, float | int]]:
    """Per-role mix and group statistics, for logs and `data_summary.json`."""
    summary: dict[str, dict[str, float | int]] = {}
    for role in sorted({r.role for r in rollouts}):
        idx = [i for i, r in enumerate(rollouts) if r.role == role]
        rewards = [rollouts[i].reward for i in idx]
        advs = [result.advantages[i] for i in idx if result.advantages[i] is not None]
        groups = [g for g in result.groups if g.role == role]
        stats: dict[str, float | int] = {
            "rollouts": len(idx),
            "trained": len(advs),
            "masked": sum(1 for i in idx if result.reasons[i].startswith("masked")),
            "dropped_status": sum(1 for i in idx if result.reasons[i].startswith("dropped")),
            "groups": len(groups),
            "groups_kept": sum(1 for g in groups if g.status in ("kept", "singleton_baseline")),
            "groups_zero_variance": sum(1 for g in groups if g.status == "zero_variance"),
            "singletons": sum(1 for g in groups if g.size == 1),
            "mean_group_size": (sum(g.size for g in groups) / len(groups)) if groups else 0.0,
            "reward_mean": (sum(rewards) / len(rewards)) if rewards else 0.0,
            "advantage_mean": (sum(advs) / len(advs)) if advs else 0.0,
            "advantage_abs_mean": (sum(abs(a) for a in advs) / len(advs)) if advs else 0.0,
            "positive": sum(1 for a in advs if a > 0),
            "negative": sum(1 for a in advs if a < 0),
        }
        if role in result.baselines:
            stats["baseline"] = result.baselines[role]
        summary[role] = stats
    return summary
