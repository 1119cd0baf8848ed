"""Run by `accelerate launch --config_file recipes/accelerate/{fsdp2,deepspeed_zero3}.yaml` from test_sharded.py.

Accelerate builds its FSDP and DeepSpeed paths only for accelerators: with `cpu=True` (what ssrkit passes when no
GPU is visible) those configs quietly become gloo DDP. Both backends themselves run on the CPU, though — FSDP2's
`fully_shard` over a gloo device mesh and DeepSpeed's CPU accelerator (`DS_ACCELERATOR=cpu`) — so this worker
tells Accelerate that gloo is a multi-GPU backend and keeps the device on the CPU (`ACCELERATE_TORCH_DEVICE=cpu`).
Everything after that (wrapping, sharded optimizer, gathering the checkpoint, saving and loading state) is the
real backend code. Each rank records what it ran under, so the test can tell sharding really happened.

    argv: CONFIG_JSON OUT ARTIFACT...
"""

import json
import os
import sys
from pathlib import Path

import accelerate.state
from accelerate import Accelerator
from accelerate.utils import DistributedType

import ssrkit.train.loop as loop
from ssrkit.train.config import TrainConfig


def gloo_as_multi_gpu(self, cpu=False, sagemaker_dp=False, backend=None):
    return "gloo", DistributedType.MULTI_GPU


accelerate.state.PartialState._prepare_backend = gloo_as_multi_gpu
loop.Accelerator = lambda *args, cpu=False, **kwargs: Accelerator(*args, cpu=False, **kwargs)


def local_numel(param):
    if hasattr(param, "ds_tensor"):  # DeepSpeed ZeRO-3: the partition this rank holds
        return param.ds_tensor.numel()
    if hasattr(param, "to_local"):  # FSDP2 DTensor: numel() is the global size
        return param.to_local().numel()
    return param.numel()


def record(step, metrics, model, accelerator):
    params = list(model.parameters())
    info = {
        "rank": accelerator.process_index,
        "world": accelerator.num_processes,
        "step": step,
        "distributed_type": accelerator.distributed_type.value,
        "param_type": type(params[0]).__name__,
        "local_numel": sum(local_numel(p) for p in params),  # this rank's share: below the model's size if sharded
        "device": str(accelerator.device),
    }
    out = Path(sys.argv[2]) / "ranks" / f"rank{info['rank']}-step{step}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(info))


def skip_the_shm_inference_op():
    """DeepSpeed's CPU accelerator compiles a shared-memory all-reduce (`deepspeed_shm_comm`) with ninja when its
    backend starts: about 35 s on an idle 2-core box, more under load, and again for every new virtualenv path
    (the build flags name it), so on every fresh clone. Only DeepSpeed's inference all-reduce calls that op;
    ZeRO-3 training goes through torch.distributed (gloo here) with or without it. Marked unavailable, the
    backend skips the build, as it does on any machine without a compiler."""
    if os.environ.get("ACCELERATE_USE_DEEPSPEED") == "true":
        import deepspeed.ops

        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


if __name__ == "__main__":
    skip_the_shm_inference_op()
    config, out, *arts = sys.argv[1:]
    cfg = TrainConfig(**{**json.loads(config), "out": out})
    loop.train(cfg, [Path(a) for a in arts], on_step=record)
    loop.release_process_group()
