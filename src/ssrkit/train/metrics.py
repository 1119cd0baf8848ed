"""`metrics.jsonl`: one JSON object per optimizer step, appended and flushed by the main process."""

from __future__ import annotations

import json
import math
import resource
from pathlib import Path
from typing import Any

import torch


#: The per-step sums every process adds up (one all-reduce a step); `step_record` turns them into metrics.
STAT_KEYS = (
    "tokens",
    "pg",
    "kl",
    "clipped",
    "clipped_low",
    "clipped_high",
    "is_corrected",
    "with_sampler",
    "mismatch_kl",
    "total_tokens",
    "adv_sum",
    "adv_sq_sum",
    "rows",
)


def step_record(s: dict[str, float], *, step: int, epoch: int, lr: float, kl_coef: float, grad_norm: Any,
                seconds: float, device: torch.device | None) -> dict[str, Any]:
    """One line of metrics.jsonl from a step's summed statistics (`STAT_KEYS`): per-token means over the
    trained tokens of every process."""
    n = max(s["tokens"], 1.0)
    adv_mean = s["adv_sum"] / n
    return {
        "step": step,
        "epoch": epoch,
        "lr": lr,
        "loss": (s["pg"] + kl_coef * s["kl"]) / n,
        "pg_loss": s["pg"] / n,
        "kl": s["kl"] / n,
        "clip_frac": s["clipped"] / n,
        "clip_low_frac": s["clipped_low"] / n,
        "clip_high_frac": s["clipped_high"] / n,
        "is_corrected_frac": s["is_corrected"] / n,
        "sampler_mismatch_kl": s["mismatch_kl"] / max(s["with_sampler"], 1.0),
        "sampler_logprob_frac": s["with_sampler"] / n,
        "adv_mean": adv_mean,
        "adv_std": math.sqrt(max(s["adv_sq_sum"] / n - adv_mean**2, 0.0)),
        "rows": int(s["rows"]),
        "tokens": int(s["tokens"]),
        "total_tokens": int(s["total_tokens"]),
        "grad_norm": float(grad_norm) if grad_norm is not None else float("nan"),
        "seconds": seconds,
        "tokens_per_s": s["total_tokens"] / seconds if seconds > 0 else 0.0,
        "peak_mem_mb": peak_memory_mb(device),
    }


def peak_memory_mb(device: torch.device | None = None) -> float:
    """Peak CUDA memory allocated on `device` when it is a GPU, else the process's peak RSS."""
    if device is not None and device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class MetricsWriter:
    def __init__(self, path: Path, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled

    def truncate(self, after_step: int) -> None:
        """Keep only the records of steps <= `after_step` (0: start a fresh file)."""
        if not self.path.exists():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            try:
                if json.loads(line).get("step", 0) <= after_step:
                    kept.append(line)
            except json.JSONDecodeError:
                continue
        self.path.write_text("".join(k + "\n" for k in kept))

    def write(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with self.path.open("a") as fh:
            fh.write(json.dumps(clean) + "\n")
            fh.flush()
