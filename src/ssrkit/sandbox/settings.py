"""`[sandbox]`: what ssrkit.toml may set of a sandbox. Only these: the network, `cpu_seconds`, `output_bytes`,
`setup_timeout` and hidden paths are not the file's to change (a config line must never turn the network on);
every other key is an error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..store.config import Config, load_settings, setting
from .base import Limits, SandboxOptions


@dataclass
class SandboxSettings:
    SECTION: ClassVar[str] = "sandbox"

    backend: str = setting("auto", help='"local", "docker" or "auto" (docker for images, local for a path)')
    memory_mb: int = setting(Limits.memory_mb, help="address space (local) / container memory (docker), MiB")
    pids: int = setting(Limits.pids, help="processes and threads")
    cpus: float = setting(Limits.cpus, help="docker CPU quota")
    file_size_mb: int = setting(Limits.file_size_mb, help="largest file a command may write, MiB")
    env: dict[str, str] = setting(factory=dict, help="extra environment variables (after sanitizing; a "
                                  "profile's may name paths inside the repository only)")
    setup: str = setting("", help="shell command run once after start, before the pristine snapshot")


def sandbox_options(cfg: Config) -> SandboxOptions:
    """`[sandbox]` as the options of every sandbox a command opens; defaults are `Limits`'s."""
    s = load_settings(SandboxSettings, cfg)
    limits = Limits(memory_mb=s.memory_mb, pids=s.pids, cpus=s.cpus, file_size_mb=s.file_size_mb)
    return SandboxOptions(limits=limits, env=dict(s.env), setup=s.setup or None)


def backend_from_config(cfg: Config, backend: str | None = None) -> str:
    """The sandbox backend: the `--backend` flag, else `[sandbox] backend`, else "auto" (checked on open)."""
    return backend or load_settings(SandboxSettings, cfg).backend or "auto"
