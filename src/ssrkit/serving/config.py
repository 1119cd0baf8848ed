"""A server's settings (`ServeConfig`) and the one error serving raises (`ServeError`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import SsrkitError


class ServeError(SsrkitError):
    """A user-facing serving error: vLLM missing, port taken, server died or not ready in time."""


@dataclass
class ServeConfig:
    command: list[str] = field(default_factory=lambda: ["vllm", "serve"])  # the checkpoint is appended
    host: str = "127.0.0.1"
    port: int = 8000
    args: list[str] = field(default_factory=list)  # e.g. ["--max-model-len", "32768", "--tensor-parallel-size", "2"]
    served_model_name: str | None = None  # a stable name for clients; default: vLLM's (the checkpoint path)
    strategy: str = "restart"  # "restart" | "lora" | "nccl"
    ready_timeout: float = 900.0
    stop_timeout: float = 30.0
    poll_interval: float = 0.5
    log_file: Path | None = None  # the server's stdout+stderr (appended); None = our stderr
    env: dict[str, str] = field(default_factory=dict)
    lora_keep: int = 1  # lora strategy: adapters kept loaded (2: a request begun on the previous one finishes)
