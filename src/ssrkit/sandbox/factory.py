"""Opening sandboxes on repository sources; fingerprints of repository states (SPEC §3)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import SandboxError
from ..store.source import RepoSource, require_git_toplevel
from .base import PRISTINE, Sandbox, SandboxOptions

BACKENDS = ("auto", "local", "docker")


def open_sandbox(source: RepoSource, backend: str = "auto", options: SandboxOptions | None = None) -> Sandbox:
    """Start a sandbox on `source`, run `options.setup` once, take the `pristine` snapshot.

    backend "auto": docker for image sources, local for local repositories. The local backend's isolation
    can be forced with SSRKIT_LOCAL_ISOLATION=bwrap|none (default auto: bubblewrap when it works).
    """
    options = options or SandboxOptions()
    backend = (backend or "auto").lower()
    if backend not in BACKENDS:
        raise SandboxError(f"unknown sandbox backend {backend!r} (expected one of: {', '.join(BACKENDS)})")
    if backend == "auto":
        backend = "docker" if source.kind == "image" else "local"
    sb: Sandbox
    _check_source(source)
    if backend == "local":
        if source.kind != "local":
            raise SandboxError(f"the local backend needs a repository directory, not the image {source.image!r};"
                               " use --backend docker (or --repo PATH)")
        from .local import LocalSandbox

        sb = LocalSandbox(source.path, options)  # type: ignore[arg-type]
    else:
        if source.kind != "image":
            raise SandboxError(f"the docker backend runs images: build one from {source.path} with "
                               f"`ssrkit image build {source.path}` and pass --image NAME, or use --backend local")
        from .docker import DockerSandbox

        sb = DockerSandbox(source.image, source.workdir, options)  # type: ignore[arg-type]
    try:
        if options.setup:
            res = sb.run(options.setup, timeout=options.setup_timeout)
            if not res.ok:
                what = "timed out" if res.timed_out else f"failed (exit {res.exit_code})"
                tail = res.output.strip()[-600:]
                raise SandboxError(f"sandbox setup command {options.setup!r} {what}: {tail}")
        sb.snapshot(PRISTINE)
    except BaseException:
        sb.close()
        raise
    return sb


def fingerprint(source: RepoSource) -> str:
    """A cheap key of the repository state a sandbox of `source` would start from.

    local: HEAD commit + `git status --porcelain --ignored` + size/mtime of the changed, untracked and
    ignored entries (+ the path); image: the image id + workdir. Used to cache the original-code test run.
    """
    _check_source(source)
    if source.kind == "local":
        from ._repo import local_fingerprint

        if not source.path or not os.path.isdir(source.path):
            raise SandboxError(f"repository {source.path} does not exist or is not a directory")
        return "local-" + local_fingerprint(source.path)
    from .docker import client

    docker = __import__("docker")
    c = client(timeout=30)
    try:
        img = c.images.get(source.image)
    except docker.errors.ImageNotFound:
        raise SandboxError(f"Docker image {source.image!r} not found: build it with `ssrkit image build REPO`") \
            from None
    finally:
        c.close()
    return f"image-{img.id.split(':')[-1][:32]}-{source.workdir}"


def _check_source(source: RepoSource) -> None:
    """A local repository named by artifact.toml must be the top of a git work tree."""
    if source.kind == "local" and source.from_metadata and source.path and os.path.isdir(source.path):
        require_git_toplevel(Path(source.path))


def docker_available() -> str | None:
    """None when a Docker engine is reachable, else the reason (one line)."""
    from .docker import docker_available as _avail

    return _avail()
