"""Several servers of one checkpoint on one machine (`ssrkit serve --replicas N`): consecutive ports from the
first, server i on GPU i, each with its own pid file and log (`vllm-PORT.pid`, `vllm-PORT.log`), stopped and
refreshed together."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

from .config import ServeConfig
from .detached import default_log_file, default_pid_file, refresh_detached, stop_detached
from .server import PolicyServer


def replica_ports(port: int, n: int) -> list[int]:
    return [port + i for i in range(n)]


def gpu(i: int) -> str:
    """The i-th GPU this process may use (the i-th entry of CUDA_VISIBLE_DEVICES when it is set)."""
    visible = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return visible[i % len(visible)] if visible else str(i)


def replica_servers(base: ServeConfig, n: int, detach: bool) -> list[PolicyServer]:
    """N servers of `base` on ports base.port.., server i seeing only GPU i, logging to vllm-PORT.log when
    detached (else to our stderr)."""
    return [PolicyServer(replace(base, port=p, log_file=default_log_file(p) if detach else None,
                                 env={"CUDA_VISIBLE_DEVICES": gpu(i)}))
            for i, p in enumerate(replica_ports(base.port, n))]


def stop_replicas(port: int, n: int, on_stopped: Callable[[int], None]) -> None:
    """Stop the detached replicas on ports port..port+N-1, one by one; `on_stopped(pgid)` after each."""
    for p in replica_ports(port, n):
        on_stopped(stop_detached(default_pid_file(p)))


def refresh_replicas(port: int, n: int, checkpoint: str | Path, strategy: str | None) -> list[PolicyServer]:
    """Move each detached replica on ports port..port+N-1 to `checkpoint` by its strategy."""
    return [refresh_detached(default_pid_file(p), checkpoint, strategy) for p in replica_ports(port, n)]
