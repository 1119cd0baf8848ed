"""Does the trainer see what the sampler saw? Sampler vs trainer log-probs of the very tokens that were trained.

The check behind `make test-vllm` and `benchmarks/logprob_agreement.py`: every trajectory below some folders
(solver attempts and injections, rewarded or not) goes through the trainer's own path (rollouts -> rows -> right-padded batches -> forward -> log_softmax
of logits / T), with `checkpoint` — the weights that sampled them — and every trained token that carries a sampler
log-prob is compared. With processed log-probs, matching dtypes and top_p 1 the two agree to float32 rounding;
raw log-probs at T != 1 or a downcast server do not, and this is where it shows.

    from ssrkit.train.agreement import logprob_agreement
    table = logprob_agreement("runs/r1/policy0", ["runs/r1/round-001"])   # {"solver"|"injector"|"all": Agreement}

The same comparison against another checkpoint measures how far the sampling policy has moved from it: with the
first policy, `Agreement.kl` estimates KL(sampler || first policy) per token from the sampled tokens alone (the
k3 estimator, exp(d) - 1 - d with d = log p_first - log p_sampler: unbiased, never negative), which is what
`benchmarks/learning.py` and the learning panel of `ssrkit report` show. Paths may be rollout files (`*.jsonl`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import torch

from ssrkit.store import trajectory as trajectories
from ssrkit.store.artifact import TRAJECTORY
from ssrkit.train.batching import collate
from ssrkit.train.examples import Example, build_examples


@dataclass
class _Trajectory:  # what build_examples needs of a rollout
    trajectory: Path
    role: str

    @property
    def name(self) -> str:
        return str(self.trajectory)

    def load(self) -> dict[str, Any]:
        return trajectories.read(self.trajectory)


@dataclass
class Agreement:
    """|trainer - sampler| over the trained tokens of one role (or all of them)."""

    tokens: int = 0  # trained tokens compared (they carry a sampler log-prob)
    trained_tokens: int = 0  # all trained tokens of the rows
    stored_tokens: int = 0  # trained tokens that came from the server's own token ids
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> trained tokens whose log-probs were not used
    max_abs: float = 0.0
    sum_abs: float = 0.0
    sum_kl: float = 0.0  # k3 terms of KL(sampler || checkpoint)
    temperatures: set[float] = field(default_factory=set)

    @property
    def mean_abs(self) -> float:
        return self.sum_abs / self.tokens if self.tokens else math.nan

    @property
    def kl(self) -> float:
        """KL(sampler || checkpoint) per compared token (k3 estimate over the sampled tokens)."""
        return self.sum_kl / self.tokens if self.tokens else math.nan

    @property
    def stored_share(self) -> float:
        return self.stored_tokens / self.trained_tokens if self.trained_tokens else math.nan

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "trained_tokens": self.trained_tokens, "stored_share": self.stored_share,
                "max_abs": self.max_abs, "mean_abs": self.mean_abs, "kl": self.kl, "dropped": dict(self.dropped),
                "temperatures": sorted(self.temperatures)}


def _trainer_logprobs(model: Any, example: Example, pad_id: int) -> torch.Tensor:
    from ssrkit.train.loop import forward_logprobs

    batch = collate([example], pad_id)
    with torch.no_grad():
        return forward_logprobs(model, batch, trim=False)[0]


def find_trajectories(paths: Iterable[str | Path]) -> list[Any]:
    """Every trajectory.json at or below `paths`, with its role (a file that is not a trajectory is left out); a
    rollout file (`*.jsonl`) gives its lines."""
    from ssrkit.rollout_file import is_rollout_file, read_rollouts

    found: list[Any] = []
    for raw in paths:
        path = Path(raw)
        if is_rollout_file(path):
            found.extend(read_rollouts(path))
            continue
        for t in sorted([path] if path.is_file() else path.rglob(TRAJECTORY)):
            role = trajectories.role(t)
            if role is not None:
                found.append(_Trajectory(t, role))
    return found


def logprob_agreement(
    checkpoint: str | Path, paths: Iterable[str | Path], max_length: int = 32768, dtype: torch.dtype = torch.float32,
) -> dict[str, Agreement]:
    """Per role (and "all"): how far the trainer's log-probs of the trained tokens are from the sampler's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ssrkit.train.loop import dtype_kwarg

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    model = AutoModelForCausalLM.from_pretrained(checkpoint, **dtype_kwarg(dtype)).eval()
    out: dict[str, Agreement] = defaultdict(Agreement)
    for rollout in find_trajectories(paths):
        examples, stats = build_examples([(rollout, 0.0)], tokenizer, max_length)
        for key in (rollout.role, "all"):
            agg = out[key]
            agg.trained_tokens += stats.trained_tokens
            agg.stored_tokens += stats.trained_tokens_by_path.get("stored", 0)
            for reason, tokens in stats.logprobs_dropped.items():
                agg.dropped[reason] = agg.dropped.get(reason, 0) + tokens
        for example in examples:
            mask = torch.tensor(example.loss_mask[1:], dtype=torch.bool)
            sampler = torch.tensor(example.sampler_logprobs[1:], dtype=torch.float32)
            known = mask & ~torch.isnan(sampler)
            for key in (rollout.role, "all"):
                out[key].temperatures.add(example.temperature)
            if not bool(known.any()):
                continue  # nothing to compare: no forward pass
            logp = _trainer_logprobs(model, example, pad_id)
            delta = (logp[known] - sampler[known]).double()
            for key in (rollout.role, "all"):
                agg = out[key]
                if delta.numel():
                    agg.tokens += int(delta.numel())
                    agg.sum_abs += float(delta.abs().sum())
                    agg.max_abs = max(agg.max_abs, float(delta.abs().max()))
                    agg.sum_kl += float((torch.expm1(delta) - delta).sum())
    return dict(out)
