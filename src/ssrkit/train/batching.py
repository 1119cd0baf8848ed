"""Which rows go into which optimizer step, process and micro-batch; and padding them into tensors.

Every process computes the same plan (same rows, same seed). A step takes `global_batch` rows
(= micro_batch_size * grad_accum * processes); process r gets the r-th slice and cuts it into `grad_accum`
micro-batches. The last step of an epoch may be short: it is filled with empty rows (loss mask all zero) so that
every process runs the same number of forward/backward passes, which distributed training needs.
"""

from __future__ import annotations

import random
from typing import Mapping, Sequence

import torch

from ssrkit.train.examples import Example


def step_plan(n_rows: int, global_batch: int, epochs: int, seed: int, shuffle: bool = True) -> list[list[int]]:
    """Row indices for each optimizer step, epoch after epoch."""
    steps: list[list[int]] = []
    for epoch in range(epochs):
        order = list(range(n_rows))
        if shuffle:
            random.Random(seed * 1_000_003 + epoch).shuffle(order)
        steps.extend(order[i : i + global_batch] for i in range(0, n_rows, global_batch))
    return steps


def local_micro_batches(
    step_rows: Sequence[int], rank: int, world_size: int, micro_batch_size: int, grad_accum: int
) -> list[list[int | None]]:
    """This process's `grad_accum` micro-batches of the step (None = an empty filler row)."""
    per_rank = micro_batch_size * grad_accum
    padded: list[int | None] = list(step_rows) + [None] * (per_rank * world_size - len(step_rows))
    mine = padded[rank * per_rank : (rank + 1) * per_rank]
    return [mine[j * micro_batch_size : (j + 1) * micro_batch_size] for j in range(grad_accum)]


def collate(
    examples: Sequence[Example | None], pad_id: int, initial: Sequence[torch.Tensor | None] | None = None
) -> dict[str, torch.Tensor]:
    """Right-padded tensors. Targets are shifted: loss_mask/sampler_logprobs[:, t] belong to input_ids[:, t+1].
    `initial`: per row, the starting policy's log-probs of its targets (length len(input_ids) - 1), or None."""
    rows = [e for e in examples if e is not None]
    length = max([len(e.input_ids) for e in rows] + [2])
    n = len(examples)
    input_ids = torch.full((n, length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, length), dtype=torch.long)
    loss_mask = torch.zeros((n, length - 1), dtype=torch.bool)
    sampler = torch.full((n, length - 1), float("nan"), dtype=torch.float32)
    initial_logprobs = torch.full((n, length - 1), float("nan"), dtype=torch.float32)
    advantages = torch.zeros(n, dtype=torch.float32)
    temperature = torch.ones(n, dtype=torch.float32)
    for i, e in enumerate(examples):
        if e is None:
            attention_mask[i, :2] = 1  # a two-token filler that trains nothing
            continue
        t = len(e.input_ids)
        input_ids[i, :t] = torch.tensor(e.input_ids, dtype=torch.long)
        attention_mask[i, :t] = 1
        loss_mask[i, : t - 1] = torch.tensor(e.loss_mask[1:], dtype=torch.bool)
        sampler[i, : t - 1] = torch.tensor(e.sampler_logprobs[1:], dtype=torch.float32)
        if initial is not None and initial[i] is not None:
            initial_logprobs[i, : t - 1] = initial[i]
        advantages[i] = e.advantage
        temperature[i] = e.temperature
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "loss_mask": loss_mask,
        "sampler_logprobs": sampler,
        "initial_logprobs": initial_logprobs,
        "advantages": advantages,
        "temperature": temperature,
    }


def collate_rows(
    rows: Sequence[int | None],
    examples: Sequence[Example],
    pad_id: int,
    initial: Mapping[int, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """`collate` by row index (None = an empty filler row), with each row's initial log-probs where known."""
    return collate(
        [examples[i] if i is not None else None for i in rows],
        pad_id,
        [initial.get(i) if i is not None else None for i in rows] if initial else None,
    )
