"""TrainConfig: defaults < [train] of ssrkit.toml < flags; validation; the resolved TOML replays."""

from __future__ import annotations

import dataclasses

import pytest

from ssrkit.train.config import TrainConfig, config_to_toml, resolve_config, write_config
from ssrkit.train.errors import TrainError

pytestmark = pytest.mark.train


def test_precedence_and_roundtrip(tmp_path):
    toml = tmp_path / "ssrkit.toml"
    toml.write_text(
        '[train]\nlr = 2e-6\nepochs = 3\nroles = ["solver"]\nmask-statuses = "timeout,error"\n[solve]\nattempts = 8\n'
    )
    cfg = resolve_config(toml, {"epochs": 5, "seed": None})
    assert (cfg.lr, cfg.epochs, cfg.roles, cfg.mask_statuses, cfg.seed) == (
        2e-6,
        5,
        ["solver"],
        ["timeout", "error"],
        0,
    )
    write_config(cfg, tmp_path / "resolved.toml")
    assert resolve_config(tmp_path / "resolved.toml") == cfg
    assert dataclasses.asdict(TrainConfig()) == dataclasses.asdict(resolve_config(None, {}))  # defaults
    assert "epsilon_high = 0.28" in config_to_toml(TrainConfig())


@pytest.mark.parametrize(
    "text, message",
    [
        ("[train]\nlearning_rate = 1\n", "unknown key"),
        ("[train]\nepochs = 'two'\n", "must be an integer"),
        ("[train]\nis_correction = 'clip'\n", "is_correction must be one of"),
        ("[train]\nroles = ['critic']\n", "roles must be"),
        ("[train]\nmicro_batch_size = 0\n", "at least 1"),
        ("[train\n", "invalid TOML"),
    ],
)
def test_bad_configs_are_user_errors(tmp_path, text, message):
    toml = tmp_path / "ssrkit.toml"
    toml.write_text(text)
    with pytest.raises(TrainError, match=message):
        resolve_config(toml)
