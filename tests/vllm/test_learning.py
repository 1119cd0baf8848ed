"""The loop learns, against the real server: the short form of `benchmarks/learning.py` (the `lora` strategy, two
rounds of sample -> train -> refresh, then a last sampling), run as a user runs it. It starts with the session
(conftest.py `learning_run`) and runs beside the other tests, with its own server; the test that checks it runs
last.

The threshold is one that chance cannot reach. Were the policy never to change (a sign error, a refresh that keeps
serving the old weights...), each of the last round's n = 64 samples would succeed with a probability of at most
p0, the random policy's own p(success) (its first-token mass on capitals, plus the specials a server skips: an
upper bound), independently of the others (every sample has its own seed). For independent trials whose
probabilities average at most p0, P(X >= k) <= P(Binomial(n, p0) >= k) beyond the mean (Hoeffding, 1956), so the
test asks for the smallest k with P(Binomial(n, p0) >= k) <= 1e-6: with p0 = 0.091 that is 20 of 64 (0.31). The
benchmark, on the same seed, reaches 62 of 64 at round 2 (lora) and 45 of 64 (restart); both take 2 rounds to
pass 0.6 from about 0.08.

Why two rounds and 64 samples, not fewer: after one round the lora run has 21 of 64, one above the threshold,
too close to hold on another machine; with 32 samples a round the bound needs 14 of 32 and round 1 would be as
close. A round costs about 10 s here (sampling, training, hot swap, measuring): the server's one start is most of
this test, so fewer rounds would buy little and lose the margin.
"""

from __future__ import annotations

import json
import subprocess
from math import comb

import pytest

pytestmark = pytest.mark.timeout(900)
ALPHA = 1e-6


def binomial_tail(n: int, p: float, k: int) -> float:
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def threshold(n: int, p0: float) -> int:
    """The fewest successes of n that an unchanged policy reaches with probability at most ALPHA."""
    return next(k for k in range(n + 1) if binomial_tail(n, p0, k) <= ALPHA)


def test_threshold_by_hand():
    assert threshold(64, 0.091) == 20 and binomial_tail(64, 0.091, 19) > ALPHA


def test_a_policy_learns_through_sampler_trainer_and_refresh(learning_run):
    """The run was started with the session (conftest.py `learning_run`); this test, sorted last, waits for it."""
    try:
        rc = learning_run.proc.wait(timeout=840)
    except subprocess.TimeoutExpired:
        pytest.fail(f"benchmarks/learning.py still running after 840 s: {learning_run.log}")
    assert rc == 0, learning_run.log.read_text()[-5000:]
    out, work = learning_run.json, learning_run.work
    result = json.loads(out.read_text())
    rates, rows, n, p0 = result["lora"], result["rounds"]["lora"], result["task"]["samples_per_round"], result["task"]["p0"]
    assert len(rates) == 3 and n == 64 and 0.02 < p0 < 0.2, (rates, p0)
    assert rates[-1] * n >= threshold(n, p0), (rates, p0, threshold(n, p0))
    for row in rows:  # every round sampled the weights that were just trained (the hot-swapped adapter)
        assert row["gap"] <= 1e-4, row
    assert rows[0]["kl"] < 1e-3 < rows[-1]["kl"], [r["kl"] for r in rows]  # it moved away from the start
    # round 1 sampled the base; each later round the adapter just trained, by its versioned name (steps rising)
    from ssrkit.store.policy import parse_alias

    served = [r["served"] for r in rows]
    steps = [(parse_alias(name) or {}).get("step") for name in served[1:]]
    assert served[0] == "policy" and all(steps) and steps == sorted(set(steps)), served
    assert (work / "learning.png").stat().st_size > 0 and result["plot"]
