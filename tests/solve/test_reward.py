"""Reward values against hand-computed cases (SPEC §7)."""

import pytest

from ssrkit.verdict.rewards import injector_reward, reward_record, solve_rate, solver_reward

pytestmark = pytest.mark.fast


def test_solver_reward():
    assert solver_reward(True) == 1.0
    assert solver_reward(False) == -1.0


@pytest.mark.parametrize("n_solved, expected", [
    (0, -0.8),          # never solved: -alpha
    (1, 0.775),         # s = 1/8: 1 - 1.8/8 = 1 - 0.225
    (4, 0.1),           # s = 1/2: 1 - 0.9
    (8, -0.8),          # always solved: -alpha
])
def test_injector_reward_eight_attempts(n_solved, expected):
    passed = [True] * n_solved + [False] * (8 - n_solved)
    rec = reward_record(valid=True, passed=passed)
    assert rec["injector_reward"] == pytest.approx(expected)
    assert rec["n_attempts"] == 8
    assert rec["n_solved"] == n_solved
    assert rec["solve_rate"] == n_solved / 8
    assert rec["alpha"] == 0.8
    assert rec["solver_rewards"] == [1.0] * n_solved + [-1.0] * (8 - n_solved)


def test_attempt_order_is_kept():
    rec = reward_record(valid=True, passed=[False, True, False], attempts=["001", "002", "003"])
    assert rec["solver_rewards"] == [-1.0, 1.0, -1.0]
    assert rec["attempts"] == ["001", "002", "003"]
    assert rec["injector_reward"] == pytest.approx(1 - 1.8 / 3)


def test_invalid_artifact_gets_minus_one_without_solving():
    rec = reward_record(valid=False, passed=[True, True])
    assert rec == {"valid": False, "n_attempts": 0, "n_solved": 0, "solve_rate": None, "alpha": 0.8,
                   "injector_reward": -1.0, "solver_rewards": []}
    assert injector_reward(False, None) == -1.0


def test_alpha_is_a_parameter():
    assert injector_reward(True, 0.0, alpha=0.5) == -0.5
    assert injector_reward(True, 1.0, alpha=0.5) == -0.5
    assert injector_reward(True, 0.25, alpha=0.5) == pytest.approx(0.625)
    # the two branches meet: just above 0 the reward is close to 1, falling linearly to -alpha at 1
    assert injector_reward(True, 1e-9) == pytest.approx(1.0)
    assert injector_reward(True, 1 - 1e-9) == pytest.approx(-0.8)


def test_errors():
    with pytest.raises(ValueError):
        solve_rate([])
    with pytest.raises(ValueError):
        reward_record(valid=True, passed=[])
    with pytest.raises(ValueError):
        injector_reward(True, 1.5)
    with pytest.raises(ValueError):
        injector_reward(True, 0.5, alpha=2)
