"""Two processes (torchrun, gloo on CPU): both ranks really run, end with identical parameters, and the update
equals one process accumulating the same rows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from fixtures.net import free_port  # noqa: E402
from fixtures.paths import ROOT, SRC, pythonpath  # noqa: E402
from ssrkit.train.config import TrainConfig  # noqa: E402
from ssrkit.train.loop import train  # noqa: E402

#: under xdist (`make test`): never two multi-process torch runs at once on 2 cores
pytestmark = [pytest.mark.train, pytest.mark.xdist_group("ranks")]
HERE = Path(__file__).parent


def test_two_ranks_stay_identical_and_match_one_process(tmp_path, tiny_tok, tiny_model_dir):
    from fixtures.training import conversation, make_trajectory, write_artifact

    art = write_artifact(
        tmp_path / "arts",
        "a",
        [
            (make_trajectory(tiny_tok, conversation("first", 2)), True),
            (make_trajectory(tiny_tok, conversation("second", 1), stored=False), False),
        ],
    )
    out = tmp_path / "dist"
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath(),
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_addr",
        "127.0.0.1",
        "--master_port",
        str(free_port()),
        str(HERE / "dist_worker.py"),
        str(tiny_model_dir),
        str(out),
        str(art),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]

    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world"] == 2 and r["step"] == 1 for r in ranks)
    assert "MULTI_CPU" in ranks[0]["distributed_type"]
    assert ranks[0]["sha"] == ranks[1]["sha"]
    assert json.loads((out / "trainer_state.json").read_text())["world_size"] == 2

    single = tmp_path / "single"
    train(
        TrainConfig(
            model=str(tiny_model_dir),
            out=str(single),
            lr=100.0,
            adam_eps=1e4,
            max_grad_norm=0.0,
            micro_batch_size=1,
            grad_accum=2,
            max_steps=1,
            shuffle=False,
        ),
        [art],
    )
    a, b, base = (load_file(p / "model.safetensors") for p in (out, single, tiny_model_dir))
    assert max((a[k] - base[k]).abs().max().item() for k in a) > 1e-4
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-7, rtol=1e-5), k


def test_accelerate_launch_with_the_ddp_recipe(tmp_path, tiny_tok, tiny_model_dir):
    """The user-facing path: `accelerate launch --config_file recipes/accelerate/ddp.yaml -m ssrkit.train`, with the
    launcher's bf16 (autocast on the CPU here)."""
    from fixtures.training import conversation, make_trajectory, write_artifact

    art = write_artifact(
        tmp_path / "arts",
        "a",
        [
            (make_trajectory(tiny_tok, conversation("first", 2)), True),
            (make_trajectory(tiny_tok, conversation("second", 1), stored=False), False),
        ],
    )
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    recipe = ROOT / "recipes" / "accelerate" / "ddp.yaml"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(recipe),
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        "--mixed_precision",
        "bf16",
        "-m",
        "ssrkit.train",
        str(art),
        "--model",
        str(tiny_model_dir),
        "--out",
        str(out),
        "--grad-accum",
        "1",
        "--json",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and summaries[0]["world_size"] == 2  # two ranks ran, rank 0 reported
    assert (out / "model.safetensors").is_file()
    assert json.loads((out / "trainer_state.json").read_text())["mixed_precision"] == "bf16"
