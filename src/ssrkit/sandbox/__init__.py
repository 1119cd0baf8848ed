"""Sandboxes: private, resettable copies of a repository where untrusted code runs (SPEC §3).

Backends: `local` (`sandbox/local.py`: a RAM workspace, bubblewrap isolation when available) and `docker`
(`sandbox/docker.py`: one container per sandbox). `open_sandbox` picks one and takes the `pristine` snapshot.
"""

from ._cleanup import Interrupted, install_signal_handlers, stopped
from .base import PRISTINE, ExecResult, FileTooLargeError, Limits, Sandbox, SandboxOptions
from .env import environment_key, sanitized_env

__all__ = ["PRISTINE", "ExecResult", "FileTooLargeError", "Interrupted", "Limits", "Sandbox", "SandboxOptions",
           "backend_from_config", "docker_available", "environment_key", "fingerprint", "install_signal_handlers",
           "open_sandbox", "sanitized_env", "stopped"]


def backend_from_config(cfg, backend: str | None = None) -> str:
    """The sandbox backend: the `--backend` flag, else `[sandbox] backend`, else "auto" (checked on open)."""
    return backend or cfg.get("sandbox", "backend") or "auto"


def open_sandbox(source, backend: str = "auto", options: SandboxOptions | None = None) -> Sandbox:
    """Start a sandbox on a repository source (`ssrkit.store.source.RepoSource`).

    backend: "local", "docker" or "auto" (docker for image sources, local for local repositories).
    The returned sandbox has a `pristine` snapshot of the repository as the user has it.
    """
    from .factory import open_sandbox as _open

    return _open(source, backend, options or SandboxOptions())


def fingerprint(source) -> str:
    """A cheap key of the repository state a sandbox of `source` starts from (see `factory.fingerprint`)."""
    from .factory import fingerprint as _fp

    return _fp(source)


def docker_available() -> str | None:
    """None when a Docker engine answers, else the reason."""
    from .factory import docker_available as _avail

    return _avail()
