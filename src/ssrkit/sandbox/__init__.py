"""Sandboxes: private, resettable copies of a repository where untrusted code runs (SPEC §3)."""

from .base import PRISTINE, ExecResult, Limits, Sandbox, SandboxOptions, sanitized_env

__all__ = ["PRISTINE", "ExecResult", "Limits", "Sandbox", "SandboxOptions", "sanitized_env", "open_sandbox"]


def open_sandbox(source, backend: str = "auto", options: SandboxOptions | None = None) -> Sandbox:
    """Start a sandbox on a repository source (`ssrkit.source.RepoSource`).

    backend: "local", "docker" or "auto" (docker for image sources, local for local repositories).
    The returned sandbox has a `pristine` snapshot of the repository as the user has it.
    """
    from .factory import open_sandbox as _open

    return _open(source, backend, options or SandboxOptions())
