"""The GRPO loss, per token, as sums: the loop divides by the global count of trained tokens.

For a trained token with current log-prob `logp`, advantage `A` (its trajectory's), sampler log-prob `s` and
initial-policy log-prob `i` (NaN when unknown; `i` is the log-prob under the checkpoint the run started from,
computed once before the first step when the loop needs it):

    proximal = i if known and old_logprobs != "current" else logp.detach()
    old      = s if known and old_logprobs == "sampler" else proximal
    ratio    = exp(logp - old)
    pg       = -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A)     # clipped surrogate

Importance-sampling correction for the sampler/trainer mismatch w = exp(proximal - s) (tokens with s only):
- old_logprobs "initial" or "current": pg *= min(w, C) ("truncate", TIS) or pg *= w * [1/C <= w <= C] ("mask");
  with "initial" this is decoupled PPO: the ratio is clipped against the trainer's starting policy, and w
  corrects for that policy not being exactly the sampler;
- old_logprobs "sampler": the ratio already carries w (here w = exp(logp.detach() - s)), so "truncate" bounds the
  unclipped branch of a negative advantage at C * |A| (dual clip) and "mask" drops tokens with w outside [1/C, C].
Optional KL to a frozen reference (k3 estimator): + kl_coef * (exp(ref - logp) - (ref - logp) - 1).
Masked positions are removed with `torch.where`, so they get exactly zero gradient (no 0 * NaN).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MAX_LOG_RATIO = 20.0


@dataclass
class LossOptions:
    epsilon_low: float = 0.2
    epsilon_high: float = 0.28
    old_logprobs: str = "sampler"  # "sampler" | "initial" | "current"
    is_correction: str = "truncate"  # "truncate" | "mask" | "none"
    is_cap: float = 2.0
    kl_coef: float = 0.0


def token_logprobs(
    logits: torch.Tensor, input_ids: torch.Tensor, temperature: torch.Tensor | None = None
) -> torch.Tensor:
    """log p(input_ids[:, t] | input_ids[:, :t]) for t >= 1, shape [B, T-1], in float32.

    Computed one row at a time (gather - logsumexp) so that no second [B, T, V] tensor is materialised.
    """
    out = []
    for i in range(logits.shape[0]):
        row = logits[i, :-1].float()
        if temperature is not None:
            row = row / temperature[i]
        target = input_ids[i, 1:].unsqueeze(-1)
        out.append(row.gather(-1, target).squeeze(-1) - torch.logsumexp(row, dim=-1))
    return torch.stack(out)


def grpo_token_loss(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    sampler_logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    options: LossOptions | None = None,
    initial_logp: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Per-token loss summed over trained tokens, and summed statistics (detached), all over the same tokens.

    logp, sampler_logp, ref_logp, initial_logp, mask: [B, T]; advantages: [B] (one per row) or [B, T].
    Returns (loss_sum, stats) with stats: tokens, pg, kl, clipped, clipped_low, clipped_high, is_corrected,
    mismatch_kl (k3 of sampler vs trainer over tokens with sampler log-probs), with_sampler.
    """
    options = options or LossOptions()
    mask = mask.bool()
    if advantages.dim() == 1:
        advantages = advantages[:, None].expand_as(logp)
    advantages = advantages.to(logp.dtype)
    current = logp.detach()
    proximal = current  # what the ratio is taken against where the sampler's log-prob is not used
    if initial_logp is not None and options.old_logprobs != "current":
        proximal = torch.where(torch.isnan(initial_logp), current, initial_logp.to(logp.dtype))
    if sampler_logp is None:
        has_sampler = torch.zeros_like(mask)
        sampler = proximal
    else:
        has_sampler = mask & ~torch.isnan(sampler_logp)
        sampler = torch.where(has_sampler, sampler_logp.to(logp.dtype), proximal)
    old = sampler if options.old_logprobs == "sampler" else proximal

    log_ratio = torch.clamp(logp - old, -MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    surrogate = ratio * advantages
    clipped_ratio = torch.clamp(ratio, 1.0 - options.epsilon_low, 1.0 + options.epsilon_high)
    surrogate_clipped = clipped_ratio * advantages
    pg = -torch.minimum(surrogate, surrogate_clipped)
    with torch.no_grad():
        clipped = surrogate_clipped < surrogate  # the clipped branch is active (no gradient)
        clipped_low = clipped & (advantages < 0)
        clipped_high = clipped & (advantages > 0)

    # importance-sampling correction of the sampler/trainer mismatch
    trainer = current if options.old_logprobs == "sampler" else proximal
    log_w = torch.where(has_sampler, torch.clamp(trainer - sampler, -MAX_LOG_RATIO, MAX_LOG_RATIO), 0.0)
    w = torch.exp(log_w)  # 1 where there is no sampler log-prob
    corrected = torch.zeros_like(mask)
    cap = options.is_cap
    if options.is_correction == "mask":
        keep = (w >= 1.0 / cap) & (w <= cap)
        corrected = has_sampler & ~keep
        if options.old_logprobs != "sampler":
            pg = pg * w
        pg = torch.where(corrected, torch.zeros_like(pg), pg)
    elif options.is_correction == "truncate":
        if options.old_logprobs != "sampler":
            corrected = has_sampler & (w > cap)
            pg = pg * torch.clamp(w, max=cap)
        else:
            bound = cap * advantages.abs()
            corrected = has_sampler & (advantages < 0) & (pg > bound)
            pg = torch.where(corrected, bound.detach(), pg)  # constant: no gradient through the cut tokens
    elif options.old_logprobs != "sampler":
        pg = pg * w

    per_token = pg
    kl = torch.zeros_like(logp)
    if ref_logp is not None and options.kl_coef > 0:
        delta = torch.clamp(ref_logp.to(logp.dtype) - logp, -MAX_LOG_RATIO, MAX_LOG_RATIO)
        kl = torch.exp(delta) - delta - 1.0
        per_token = per_token + options.kl_coef * kl

    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    loss_sum = torch.where(mask, per_token, zero).sum()
    with torch.no_grad():
        m = mask.to(logp.dtype)
        mismatch = torch.exp(-log_w) + log_w - 1.0  # k3 estimate of KL(sampler || trainer)
        stats = {
            "tokens": m.sum(),
            "pg": torch.where(mask, pg, zero).sum(),
            "kl": torch.where(mask, kl, zero).sum(),
            "clipped": (clipped & mask).to(logp.dtype).sum(),
            "clipped_low": (clipped_low & mask).to(logp.dtype).sum(),
            "clipped_high": (clipped_high & mask).to(logp.dtype).sum(),
            "is_corrected": (corrected & mask).to(logp.dtype).sum(),
            "with_sampler": has_sampler.to(logp.dtype).sum(),
            "mismatch_kl": torch.where(has_sampler, mismatch, zero).sum(),
        }
    return loss_sum, stats
