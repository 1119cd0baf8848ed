"""End to end through the CLI: artifact dirs -> `python -m ssrkit.train` -> a checkpoint whose log-probs moved
in the direction of each row's advantage; user errors exit 2 with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

torch = pytest.importorskip("torch")

from fixtures.paths import SRC  # noqa: E402
from fixtures.training import row_logprob_sums  # noqa: E402

pytestmark = pytest.mark.train


def cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, "-m", "ssrkit.train", *map(str, args)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_end_to_end_moves_logprobs_with_advantages(tmp_path, artifact_factory, tiny_model_dir, tiny_tok):
    from ssrkit.train.advantages import compute_advantages
    from ssrkit.train.examples import build_examples
    from ssrkit.train.rollouts import read_rollouts

    artifact_factory(tmp_path / "arts")
    out = tmp_path / "out"
    (tmp_path / "ssrkit.toml").write_text("[train]\nlr = 1e-9\nepochs = 4\nmicro_batch_size = 2\n")
    proc = cli(
        tmp_path / "arts",
        "--model",
        tiny_model_dir,
        "--out",
        out,
        "--lr",
        "3e-4",
        "--grad-accum",
        "1",
        "--config",
        tmp_path / "ssrkit.toml",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stored" in proc.stderr and "re-rendered" in proc.stderr  # which tokenization path was taken
    resolved = tomllib.loads((out / "train_config.toml").read_text())["train"]
    assert resolved["lr"] == 3e-4 and resolved["epochs"] == 4 and resolved["micro_batch_size"] == 2  # flag > toml

    scan = read_rollouts([tmp_path / "arts"])
    advantages = compute_advantages(scan.rollouts).advantages
    examples, stats = build_examples(
        [(r, a) for r, a in zip(scan.rollouts, advantages) if a is not None], tiny_tok, 32768
    )
    assert stats.paths["stored"] > 0 and stats.paths["template"] > 0
    before = row_logprob_sums(tiny_model_dir, examples)
    after = row_logprob_sums(out, examples)
    moved = [(e.advantage, b, a) for e, b, a in zip(examples, before, after)]
    assert all((a - b) * adv > 0 for adv, b, a in moved), moved
    assert {e.role for e in examples} == {"solver", "injector"}

    from ssrkit.store.policy import read_version

    first = read_version(out)  # every checkpoint says which version it is: step = optimizer steps since the root
    steps = sum(1 for _ in (out / "metrics.jsonl").open())
    assert first.step == steps and first.parent is None and first.lineage == first.id
    proc = cli(tmp_path / "arts", "--model", out, "--out", tmp_path / "out2", "--max-steps", "1", "--lr", "1e-9")
    assert proc.returncode == 0, proc.stderr[-3000:]
    second = read_version(tmp_path / "out2")
    assert (second.step, second.parent, second.lineage) == (steps + 1, first.id, first.id)


def invoke(*args):
    """The CLI function in-process (no interpreter start-up): exit code and stderr."""
    import typer
    from typer.testing import CliRunner

    from ssrkit.cli.train import train

    app = typer.Typer()
    app.command()(train)
    result = CliRunner().invoke(app, [str(a) for a in args])
    return result.exit_code, result.stderr


def test_user_errors_exit_2_with_one_line(tmp_path, tiny_model_dir):
    (tmp_path / "empty").mkdir()
    proc = cli(tmp_path / "empty", "--model", tiny_model_dir, "--out", tmp_path / "o")  # a real process
    assert (
        proc.returncode == 2
        and proc.stderr.strip().splitlines()[-1] == "error: no artifacts or rollout files (*.jsonl) found in the given paths"
    )
    assert "Traceback" not in proc.stderr

    art = tmp_path / "bare"
    art.mkdir()
    (art / "artifact.toml").write_text('id = "bare"\n')
    code, err = invoke(art, "--model", tiny_model_dir, "--out", tmp_path / "o")
    assert code == 2 and "no trajectories" in err

    code, err = invoke(art, "--model", tmp_path / "nope", "--out", tmp_path / "o")
    assert code == 2 and "model path not found" in err

    code, err = invoke(art, "--out", tmp_path / "o")
    assert code == 2 and "--model" in err

    code, err = invoke(art, "--model", tiny_model_dir, "--out", tmp_path / "o", "--is-correction", "bogus")
    assert code == 2 and "is_correction must be one of" in err

    (tmp_path / "not-a-model").mkdir()
    code, err = invoke(tmp_path / "empty", "--model", tmp_path / "not-a-model", "--out", tmp_path / "o")
    assert code == 2 and err.startswith("error: ")
    for line in err.strip().splitlines():
        assert not line.startswith("Traceback")


def test_rollout_file_errors_exit_2_with_one_line(tmp_path, tiny_model_dir, tiny_tok):
    """A bad line of a rollout file stops the run before anything trains, naming FILE:LINE; a --roles that no
    rollout has is an error, not a run on nothing."""
    import json

    from fixtures.training import conversation, make_trajectory

    from ssrkit.rollout_file import rollout_record, write_rollouts

    good = [rollout_record(make_trajectory(tiny_tok, conversation(f"t{i}", 1)), role="echo", group="g", reward=i)
            for i in range(2)]
    path = write_rollouts(tmp_path / "r.jsonl", good)
    with path.open("a") as fh:
        fh.write(json.dumps({**good[0], "reward": "high"}) + "\n")
    code, err = invoke(path, "--model", tiny_model_dir, "--out", tmp_path / "o")
    assert code == 2 and err.strip() == f"error: {path}:3: reward must be a finite number, got 'high'", err
    assert not (tmp_path / "o" / "model.safetensors").exists()

    write_rollouts(path, good)
    code, err = invoke(path, "--model", tiny_model_dir, "--out", tmp_path / "o2", "--roles", "ecco")
    assert code == 2 and err.strip() == "error: --roles ecco: no rollout has that role (found: echo)", err


def test_missing_torch_says_what_to_install(tmp_path, monkeypatch):
    import importlib.util

    import typer
    from typer.testing import CliRunner

    from ssrkit.cli.train import train

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    app = typer.Typer()
    app.command()(train)
    (tmp_path / "a").mkdir()
    result = CliRunner().invoke(app, [str(tmp_path / "a"), "--model", "m", "--out", "o"])
    assert result.exit_code == 2
    assert "pip install 'ssrkit[train]'" in result.output


def test_kl_and_activation_checkpointing(tmp_path, artifact_factory, tiny_model_dir):
    """KL to the reference and activation checkpointing (GPU defaults), exercised on the CPU."""
    import json

    from ssrkit.train.config import TrainConfig
    from ssrkit.train.loop import train

    artifact_factory(tmp_path / "arts", with_logprobs=False)
    out = tmp_path / "out"
    train(
        TrainConfig(
            model=str(tiny_model_dir),
            out=str(out),
            kl_coef=0.1,
            lr=1e-3,
            gradient_checkpointing="on",
            max_steps=2,
            micro_batch_size=2,
            grad_accum=2,
            save_dtype="bfloat16",
        ),
        [tmp_path / "arts"],
    )
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["kl"] == 0.0 and records[1]["kl"] > 0  # the policy left the reference after step 1
    assert json.loads((out / "config.json").read_text()).get("dtype") == "bfloat16"
