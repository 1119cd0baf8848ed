"""Where units of work run (SPEC §13): the executor seam, shards, and what a unit carries to another machine.

`base.py` holds the seam (`Executor`, the local thread pool, shards, artifact and source references) and
`ray.py` the Ray engine (the `ssrkit[ray]` extra, imported only when asked for); this package picks one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from ..errors import SsrkitError
from ..store.config import load_settings, setting
from .base import (EXECUTORS, ArtifactRef, Executor, LocalExecutor, Scratch, Shard, SourceRef, node_cache,
                   pack_tree, read_tree, relabel, run_units, shard_items, stream_units, unpacked_repo, write_tree)

if TYPE_CHECKING:
    from ..store.config import Config

__all__ = ["EXECUTORS", "ArtifactRef", "Executor", "LocalExecutor", "Scratch", "Shard", "SourceRef",
           "executor_from_config", "make_executor", "node_cache", "pack_tree", "read_tree", "relabel", "run_units",
           "shard_items", "stream_units", "unpacked_repo", "write_tree"]


def make_executor(name: str | None, slots: int, *, address: str | None = None) -> Executor:
    """The executor named on the command line (`--executor`, `[run] executor`); local when None."""
    name = (name or "local").strip().lower()
    if name == "local":
        if address:
            raise SsrkitError("--ray-address needs --executor ray")
        return LocalExecutor(slots)
    if name == "ray":
        from .ray import RayExecutor

        return RayExecutor(slots, address=address)
    raise SsrkitError(f"unknown executor {name!r}; choose one of {', '.join(EXECUTORS)}")


@dataclass
class ExecutorSettings:
    """`[run]`: where units run (the flags `--executor`, `--ray-address` win)."""

    SECTION: ClassVar[str] = "run"

    executor: str = setting("local", help=f"where units run: {', '.join(EXECUTORS)}")
    ray_address: str = setting("", help="the Ray cluster to join when the executor is ray")


def executor_from_config(cfg: "Config", executor: str | None, ray_address: str | None, slots: int) -> Executor:
    """The executor of a command: the flags, then `[run] executor` / `ray_address` (local by default)."""
    s = load_settings(ExecutorSettings, cfg)
    name = executor or s.executor or "local"
    address = ray_address or s.ray_address or None
    if name == "local" and address and not ray_address:
        address = None  # a configured address is for when the executor is ray
    return make_executor(name, max(1, slots), address=address)
