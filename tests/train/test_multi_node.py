"""recipes/accelerate/multi_node.yaml as two "machines" on localhost: two `accelerate launch` invocations
(--num_machines 2, one process each, --machine_rank 0 and 1, gloo on the CPU) make the same update as one
process accumulating the same rows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from fixtures.net import free_port  # noqa: E402
from fixtures.paths import ROOT  # noqa: E402
from ssrkit.train.config import TrainConfig  # noqa: E402
from ssrkit.train.loop import train  # noqa: E402

#: under xdist (`make test`): never two multi-process torch runs at once on 2 cores
pytestmark = [pytest.mark.train, pytest.mark.xdist_group("ranks")]
RECIPE = ROOT / "recipes" / "accelerate" / "multi_node.yaml"
HYPER = dict(lr=100.0, adam_eps=1e4, max_grad_norm=0.0, micro_batch_size=1, max_steps=1, shuffle=False)


def test_two_machines_on_localhost_match_one_process(tmp_path, tiny_tok, tiny_model_dir):
    from fixtures.training import conversation, make_trajectory, write_artifact

    art = write_artifact(tmp_path / "arts", "a", [
        (make_trajectory(tiny_tok, conversation("first", 2)), True),
        (make_trajectory(tiny_tok, conversation("second", 1), stored=False), False),
    ])
    out = tmp_path / "multi"
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}

    def machine(rank: int) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(RECIPE),
               "--num_machines", "2", "--num_processes", "2", "--machine_rank", str(rank),
               "--main_process_ip", "127.0.0.1", "--main_process_port", str(port), "--mixed_precision", "no",
               "-m", "ssrkit.train", str(art), "--model", str(tiny_model_dir), "--out", str(out),
               "--lr", "100", "--adam-eps", "1e4", "--max-grad-norm", "0", "--micro-batch-size", "1",
               "--grad-accum", "1", "--max-steps", "1", "--no-shuffle", "--json"]
        return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = [machine(0), machine(1)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=300))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (stdout, stderr) in zip(procs, outs):
        assert p.returncode == 0, stderr[-3000:]
    summaries = [line for stdout, _ in outs for line in stdout.splitlines() if line.startswith("{")]
    assert len(summaries) == 1 and '"world_size": 2' in summaries[0]  # two ranks, rank 0 (machine 0) reported

    single = tmp_path / "single"
    train(TrainConfig(model=str(tiny_model_dir), out=str(single), grad_accum=2, **HYPER), [art])
    a, b, base = (load_file(p / "model.safetensors") for p in (out, single, tiny_model_dir))
    assert max((a[k] - base[k]).abs().max().item() for k in a) > 1e-4
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-7, rtol=1e-5), k
