"""GRPO training of the shared policy from rollouts on disk (SPEC §9).

Modules, in the order data flows through them:
- `rollouts`   artifact directories -> `Rollout`s (role, group, reward, exit status)
- `advantages` pure GRPO advantages by role and group
- `examples`   trajectories -> rows of token ids, loss mask, sampler log-probs
- `batching`   the step/process/micro-batch plan and padding
- `loss`       per-token log-probs and the clipped surrogate with IS correction and KL
- `loop`       the Accelerate training loop (`train(cfg, artifacts)`)
- `stream`, `follow`  continuous training on a run as its groups complete (`ssrkit train --follow RUN`)
- `checkpoint`, `metrics`  what a run writes
- `config`     `TrainConfig` and its TOML form; `tiny` a tiny model + tokenizer for tests and docs

Importing this package does not import torch; `require_train_deps()` says what to install when it is missing.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from ssrkit.train.config import TrainConfig, resolve_config
from ssrkit.train.errors import TrainError

__all__ = ["TrainConfig", "TrainError", "require_train_deps", "resolve_config", "run_follow", "run_training"]

TRAIN_DEPS = ("torch", "transformers", "accelerate", "safetensors")


def require_train_deps() -> None:
    """Raise `TrainError` naming the install command when a training dependency is missing."""
    missing = [name for name in TRAIN_DEPS if importlib.util.find_spec(name) is None]
    if missing:
        raise TrainError(f"training needs {', '.join(missing)}: pip install 'ssrkit[train]'")


def run_training(cfg: TrainConfig, artifacts):  # noqa: ANN001 - thin lazy wrapper
    """`ssrkit.train.loop.train` for a process that trains once (`ssrkit train`), imported only when called
    (it imports torch)."""
    require_train_deps()
    from ssrkit.train.loop import release_process_group, train

    try:
        return train(cfg, artifacts)
    finally:
        release_process_group()  # the run is this process's last


def run_follow(cfg: TrainConfig, run):  # noqa: ANN001 - thin lazy wrapper
    """`ssrkit.train.follow.follow`: continuous training on the run directory `run` (`ssrkit train --follow`)."""
    require_train_deps()
    share_cores()
    from ssrkit.train.follow import follow
    from ssrkit.train.loop import release_process_group

    try:
        return follow(cfg, run)
    finally:
        release_process_group()


def share_cores() -> None:
    """The follower shares the machine's cores with producers, sandboxes and servers by design, and torch's OpenMP
    threads spin between parallel regions by default: on busy cores the spin takes CPU from the others and each
    region waits for a descheduled thread (`benchmarks/continuous.py`'s docstring: 3x the CPU and wall time of a
    step on 2 shared cores). So the follower's threads sleep when they wait (`OMP_WAIT_POLICY=PASSIVE`), unless
    the user chose a policy; it must be set before torch loads OpenMP, so it does nothing once torch is imported."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
