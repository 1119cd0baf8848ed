"""`metrics.jsonl`: one JSON object per optimizer step, appended and flushed by the main process."""

from __future__ import annotations

import json
import math
import resource
from pathlib import Path
from typing import Any

import torch


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
