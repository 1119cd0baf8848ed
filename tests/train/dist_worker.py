"""Run by `torchrun --nproc_per_node 2` from test_distributed.py: one training step, then each rank writes a
checksum of its own parameters (so the test sees that two ranks ran and ended identical)."""

import hashlib
import json
import sys
from pathlib import Path

from ssrkit.train.config import TrainConfig
from ssrkit.train.loop import release_process_group, train


def record(step, metrics, model, accelerator):
    digest = hashlib.sha256()
    for name, param in sorted(accelerator.unwrap_model(model).named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().numpy().tobytes())
    rank = accelerator.process_index
    out = Path(sys.argv[2]) / f"rank{rank}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rank": rank,
                "world": accelerator.num_processes,
                "step": step,
                "sha": digest.hexdigest(),
                "device": str(accelerator.device),
                "distributed_type": str(accelerator.distributed_type),
            }
        )
    )


if __name__ == "__main__":
    model, out, *arts = sys.argv[1:]
    cfg = TrainConfig(
        model=model,
        out=out,
        lr=100.0,
        adam_eps=1e4,
        max_grad_norm=0.0,
        micro_batch_size=1,
        grad_accum=1,
        max_steps=1,
        shuffle=False,
    )
    train(cfg, [Path(a) for a in arts], on_step=record)
    release_process_group()
