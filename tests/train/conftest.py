"""Fixtures for the training tests: artifact directories with real trajectories (the tiny model: tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fixtures.training import conversation, make_trajectory, write_artifact


@pytest.fixture
def artifact_factory(tiny_tok: Any):
    """Builds a small set of artifacts: stored-token and template trajectories, both roles, a masked status."""
    from ssrkit.train.tiny import tiny_model

    def build(root: Path, with_logprobs: bool = True) -> list[Path]:
        from transformers import AutoModelForCausalLM  # noqa: F401  (import cost paid once)

        model = None
        if with_logprobs:
            model = tiny_model(tiny_tok, seed=0)
            model.eval()
        letters = iter(["AB", "CD", "EF", "GH", "IJ", "KL", "MN", "OP", "QR", "ST"])

        def conv(tag, turns=2):
            return conversation(tag, turns, next(letters))

        arts = [
            write_artifact(
                root,
                "alpha",
                [
                    (make_trajectory(tiny_tok, conv("alpha0"), stored=True, logprobs_model=model), True),
                    (make_trajectory(tiny_tok, conv("alpha1"), stored=True, logprobs_model=model), False),
                    (make_trajectory(tiny_tok, conv("alpha2"), stored=False), False),
                    (make_trajectory(tiny_tok, conv("alpha3"), stored=False), True),
                ],
                injector=(make_trajectory(tiny_tok, conv("inja", 1), role="injector"), 0.1),
            ),
            write_artifact(
                root,
                "beta",
                [
                    (make_trajectory(tiny_tok, conv("beta0"), stored=True), True),
                    (make_trajectory(tiny_tok, conv("beta1"), stored=False), False),
                    (make_trajectory(tiny_tok, conv("beta2"), exit_status="max_turns"), False),
                ],
                injector=(make_trajectory(tiny_tok, conv("injb", 1), role="injector", stored=False), -0.8),
            ),
        ]
        return arts

    return build
