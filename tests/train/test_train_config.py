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
        ("[train]\nlearning_rate = 1\n", "unknown setting 'learning_rate'"),
        ("[train]\nepochs = 'two'\n", r"\[train\] epochs must be an integer, got 'two'"),
        ("[train]\nmax_lenght = 1\n", r"\[train\]: unknown setting 'max_lenght' \(did you mean 'max_length'\?\); known: model, out"),
        ("[train]\nis_correction = 'clip'\n", "is_correction must be one of"),
        ("[train]\nroles = ['']\n", "roles must be"),
        ("[train]\nmicro_batch_size = 0\n", "at least 1"),
        ("[train\n", "not valid TOML"),
    ],
)
def test_bad_configs_are_user_errors(tmp_path, text, message):
    toml = tmp_path / "ssrkit.toml"
    toml.write_text(text)
    with pytest.raises(TrainError, match=message):
        resolve_config(toml)


def test_every_field_is_a_flag_with_its_meaning_and_default():
    """`ssrkit train`'s options are made from TrainConfig: a new field is a flag, documented by its metadata."""
    import inspect

    from ssrkit.cli.train import train
    from ssrkit.store.config import settings_help

    params = inspect.signature(train).parameters
    docs = settings_help(TrainConfig)
    for name, doc in docs.items():
        assert name in params, name
        assert doc.help and doc.panel, f"TrainConfig.{name} has no help or panel in its metadata"
        opt = params[name].annotation.__metadata__[0]
        if doc.default not in ("", None, []):
            shown = ("on" if doc.default else "off") if isinstance(doc.default, bool) else doc.default
            shown = ",".join(shown) if isinstance(shown, list) else shown
            assert f"(default: {shown})" in opt.help, (name, opt.help)
    assert docs["lr"].panel == "Optimisation" and docs["kl_coef"].panel == "Loss"


def test_train_help_is_the_snapshot_taken_before_the_settings_loader():
    """`ssrkit train --help` at a fixed width is byte-identical to its text on main before TrainConfig's help
    moved from source comments (read by a regex) to field metadata (#27 phase 5.1; data/train_help.txt)."""
    from pathlib import Path

    from typer.testing import CliRunner

    from ssrkit.cli.main import app

    res = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "100", "TERMINAL_WIDTH": None,
                                                            "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    assert res.output == (Path(__file__).parent / "data" / "train_help.txt").read_text(encoding="utf-8")


def test_flags_reach_the_config(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import typer

    from ssrkit.cli import train as cli_train

    seen = {}

    def fake_resolve(config, flags):
        seen.update(flags)
        raise TrainError("stop here")

    app = typer.Typer()
    app.command()(cli_train.train)
    monkeypatch.setattr("ssrkit.train.resolve_config", fake_resolve)
    res = CliRunner().invoke(app, [str(tmp_path), "--lr", "3e-6", "--keep-zero-variance", "--roles", "solver",
                                   "--no-shuffle"])
    assert res.exit_code == 2 and "stop here" in res.output
    assert (seen["lr"], seen["drop_zero_variance"], seen["roles"], seen["shuffle"], seen["epochs"]) == (
        3e-6, False, "solver", False, None)
