"""Grading on a small controlled repository: baselines, correct and partial fixes, reward hacks."""

from __future__ import annotations

import pytest

from ssrkit.solve import make_solver

from . import calc


def test_oracle_passes_null_fails(engine, calc_artifact):
    art = calc_artifact
    source = art.metadata.repo
    [oracle] = engine.solve([(art, source)], make_solver("oracle"), attempts=1)
    assert oracle["passed"], oracle["reason"]
    assert oracle["solver"] == "oracle" and oracle["exit_code"] == 0
    assert oracle["canary"]["status"] == "caught"
    assert set(oracle["tests"]) >= set(calc.ALL_TESTS)
    [null] = engine.solve([(art, source)], make_solver("null"), attempts=2)
    assert not null["passed"]
    assert "FAIL_TO_PASS" in null["reason"]
    assert null["canary"] is None
