"""Rewards for both roles (SPEC §7). Pure functions: no I/O, no sandbox, no clock.

Solver attempt: +1 when it succeeds, −1 otherwise. Injector, with s the solve rate over the attempts and α
(default 0.8)::

    r_inject = -1.0             if validation failed
             = -α               if s == 0 or s == 1
             = 1 - (1 + α)·s    if 0 < s < 1

With 8 attempts this steers the injector toward bugs solved about 20–25 % of the time: too easy (always
solved) and impossible (never solved) bugs are penalized like each other, and an invalid artifact is worse.
"""

from __future__ import annotations

from typing import Any, Sequence

DEFAULT_ALPHA = 0.8


def solver_reward(passed: bool) -> float:
    """+1.0 for a successful attempt, −1.0 for any other."""
    return 1.0 if passed else -1.0


def solve_rate(passed: Sequence[bool]) -> float:
    """Fraction of successful attempts; ValueError on an empty group (there is no rate to speak of)."""
    if not passed:
        raise ValueError("no attempts: the solve rate is undefined")
    return sum(1 for p in passed if p) / len(passed)


def check_alpha(alpha: float) -> float:
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha:g}")
    return alpha


def injector_reward(valid: bool, s: float | None, alpha: float = DEFAULT_ALPHA) -> float:
    """The injector's reward for one artifact: −1 if invalid, −α at s ∈ {0, 1}, else 1 − (1+α)·s."""
    alpha = check_alpha(alpha)
    if not valid:
        return -1.0
    if s is None:
        raise ValueError("a valid artifact needs a solve rate (solve it first)")
    if not 0.0 <= s <= 1.0:
        raise ValueError(f"solve rate must be in [0, 1], got {s!r}")
    if s == 0.0 or s == 1.0:
        return -alpha
    return 1.0 - (1.0 + alpha) * s


def reward_record(*, valid: bool, passed: Sequence[bool], alpha: float = DEFAULT_ALPHA,
                  attempts: Sequence[str] | None = None) -> dict[str, Any]:
    """The `reward.json` object for one artifact.

    `passed` holds each attempt's verdict in attempt order (`attempts` their names, optional). An invalid
    artifact gets −1 and is not solved: its attempts, if any, are not counted.
    """
    alpha = check_alpha(alpha)
    if not valid:
        return {
            "valid": False,
            "n_attempts": 0,
            "n_solved": 0,
            "solve_rate": None,
            "alpha": alpha,
            "injector_reward": -1.0,
            "solver_rewards": [],
        }
    s = solve_rate(passed)
    record: dict[str, Any] = {
        "valid": True,
        "n_attempts": len(passed),
        "n_solved": sum(1 for p in passed if p),
        "solve_rate": s,
        "alpha": alpha,
        "injector_reward": injector_reward(True, s, alpha),
        "solver_rewards": [solver_reward(p) for p in passed],
    }
    if attempts is not None:
        if len(attempts) != len(passed):
            raise ValueError("one attempt name per verdict expected")
        record["attempts"] = list(attempts)
    return record
