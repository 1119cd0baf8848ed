"""FSDP2 and DeepSpeed ZeRO-3 through the shipped accelerate configs, two processes on the CPU (gloo).

The parameters really are sharded (each rank holds part of the model), the update equals one process accumulating
the same rows, tied embeddings are written once, the KL reference works beside the sharded policy, and a stopped
run resumes from its sharded state to the same weights. See sharded_worker.py for how the CPU gets these paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from ssrkit.train.config import TrainConfig  # noqa: E402
from ssrkit.train.loop import train  # noqa: E402
from fixtures.net import free_port  # noqa: E402
from fixtures.paths import ROOT, pythonpath  # noqa: E402

#: under xdist (`make test`): never two multi-process torch runs at once on 2 cores
pytestmark = [pytest.mark.train, pytest.mark.xdist_group("ranks")]
HERE = Path(__file__).parent

BACKENDS = {
    "fsdp2": ("fsdp2.yaml", "FSDP", "DTensor"),
    "zero3": ("deepspeed_zero3.yaml", "DEEPSPEED", "Parameter"),
}
# AdamW with a huge eps makes each update ~ lr/eps * gradient (see test_step.py); KL, activation checkpointing and
# the initial policy's log-probs (a no-grad pass over the sharded model before the first update) switched on
KNOBS = dict(
    lr=100.0,
    adam_eps=1e4,
    max_grad_norm=0.0,
    micro_batch_size=1,
    grad_accum=1,
    shuffle=False,
    kl_coef=0.1,
    gradient_checkpointing="on",
    save_every=1,
    old_logprobs="initial",
)


@pytest.fixture(scope="module")
def tied_model(tmp_path_factory):
    from ssrkit.train.tiny import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tied") / "model", tie_word_embeddings=True)


@pytest.fixture(scope="module")
def arts(tmp_path_factory, tiny_tok):
    from fixtures.training import conversation, make_trajectory, write_artifact

    root = tmp_path_factory.mktemp("arts")
    return [
        write_artifact(
            root,
            "a",
            [
                (make_trajectory(tiny_tok, conversation("first", 2)), True),
                (make_trajectory(tiny_tok, conversation("second", 1), stored=False), False),
                (make_trajectory(tiny_tok, conversation("third", 2)), False),
                (make_trajectory(tiny_tok, conversation("fourth", 1), stored=False), True),
            ],
        )
    ]


def launch(backend: str, knobs: dict, model: Path, out: Path, arts: list[Path], keep: Path | None = None) -> list[dict]:
    """`keep`: where the worker copies the state saved after step 1 (sharded_worker.keep_the_first_state)."""
    if backend == "zero3":
        pytest.importorskip("deepspeed", reason="DeepSpeed is not installed (pip install 'ssrkit[deepspeed]')")
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath(),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "ACCELERATE_TORCH_DEVICE": "cpu",
        "DS_ACCELERATOR": "cpu",
        **({"SHARDED_KEEP_STATE": str(keep)} if keep else {}),
    }
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "recipes" / "accelerate" / BACKENDS[backend][0]),
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        "--mixed_precision",
        "no",
        str(HERE / "sharded_worker.py"),
        json.dumps({**knobs, "model": str(model)}),
        str(out),
        *map(str, arts),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(p.read_text()) for p in sorted((out / "ranks").glob("*.json"))]


def weights(path: Path) -> dict:
    return load_file(path / "model.safetensors")


def metrics(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def one_process(tied_model, arts, tmp_path_factory):
    """The reference: one process accumulating the two ranks' micro-batches."""
    out = tmp_path_factory.mktemp("single") / "out"
    train(TrainConfig(model=str(tied_model), out=str(out), **{**KNOBS, "grad_accum": 2}), arts)
    return out


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_sharded_run_matches_one_process_and_resumes(backend, tied_model, arts, one_process, tmp_path):
    full, part = tmp_path / "full", tmp_path / "part"
    ranks = launch(backend, KNOBS, tied_model, full, arts, keep=part)
    _, distributed_type, param_type = BACKENDS[backend]
    model_numel = sum(t.numel() for t in weights(tied_model).values())
    assert {r["rank"] for r in ranks} == {0, 1} and {r["step"] for r in ranks} == {1, 2}
    for r in ranks:
        assert r["distributed_type"] == distributed_type and r["param_type"] == param_type
        assert 0 < r["local_numel"] < model_numel  # each rank holds a shard, not the model

    # the same update as one process, tied embeddings written once, the same loss and KL per step
    a, b, base = weights(full), weights(one_process), weights(tied_model)
    assert sorted(a) == sorted(b) == sorted(base) and "lm_head.weight" not in a
    assert max((a[k] - base[k]).abs().max().item() for k in a) > 1e-4
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6, rtol=1e-4), k
    for ours, theirs in zip(metrics(full), metrics(one_process), strict=True):
        assert ours["loss"] == pytest.approx(theirs["loss"], rel=1e-4)
        assert ours["kl"] == pytest.approx(theirs["kl"], rel=1e-3, abs=1e-9)
    assert metrics(full)[1]["kl"] > 0  # the reference really is the frozen start, not the moving policy

    # a run stopped during step 2 (its sharded state from step 1 on disk, copied out of the full run) resumes the
    # full schedule: the same weights, and the step-2 metrics line it had written is replaced, not doubled
    assert (part / "state").is_dir() and not (part / "model.safetensors").exists()
    state = json.loads((part / "trainer_state.json").read_text())
    assert state["step"] == 1 and not state["done"]
    assert [m["step"] for m in metrics(part)] == [1, 2]
    launch(backend, {**KNOBS, "resume": True}, tied_model, part, arts)
    c = weights(part)
    for k in a:
        assert torch.allclose(a[k], c[k], atol=1e-7), k
    assert [m["step"] for m in metrics(part)] == [1, 2]
