"""The reaper: remove, on this machine, the sandboxes of a run and the orphans of dead ssrkit processes.

A process removes its own sandboxes (`_cleanup.py`); what it cannot remove is left when it dies without
running its cleanup (SIGKILL, a Ray worker killed with its task or its node), or when its driver is
interrupted while the sandbox belongs to another process (a Ray worker on another node). Two passes:

* orphans: local temp roots, cgroups and Docker containers (this host's) whose process is gone — what each
  backend already sweeps when its next sandbox starts, here run on demand (`--executor ray` runs it on
  every node when a run starts, since a node may never open another sandbox);
* a run: every local sandbox whose `label.json` names the run (its processes killed through its cgroups,
  then its directory removed) and every Docker container labelled with it, whichever process made them —
  the driver of an interrupted Ray run has this done on every node once its tasks are cancelled.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from . import _cgroup
from ._overlay import sweep_mounts
from ._tree import force_rmtree
from .local import LABEL, _sweep_stale_dirs, _tmp_root


@dataclass
class Reaped:
    """What one reap removed on one machine."""

    local: int = 0  # local sandbox directories of the run
    containers: int = 0  # Docker containers (of the run, or of dead processes)


def reap(run: str | None = None, *, docker: bool = True) -> Reaped:
    """Remove orphans of dead ssrkit processes here and, when `run` is given, every sandbox of that run.

    Only call it with `run` once the run's units are finished or cancelled: a sandbox of the run still in
    use is removed too (its commands killed)."""
    root = _tmp_root()
    out = Reaped()
    if run is not None:  # first, so the run's sandboxes of dead processes are counted too
        out.local = _remove_local_run(root, run)
    _sweep_stale_dirs(root)
    _cgroup.sweep_stale()
    if docker:
        out.containers = _reap_docker(run)
    return out


def _remove_local_run(root: str, run: str) -> int:
    n = 0
    try:
        sessions = [d for d in os.listdir(root) if d.startswith("ssrkit-")]
    except OSError:
        return 0
    for sess in sessions:
        base = os.path.join(root, sess)
        try:
            boxes = [d for d in os.listdir(base) if d.startswith("sb-")]
        except OSError:
            continue
        for box in boxes:
            d = os.path.join(base, box)
            try:
                with open(os.path.join(d, LABEL), encoding="utf-8") as fh:
                    label = json.load(fh)
            except (OSError, ValueError):
                continue
            if label.get("run") != run:
                continue
            cgroups = [str(p) for p in label.get("cgroups") or [] if _cgroup.is_sandbox_cgroup(str(p))]
            if cgroups:
                _cgroup.SandboxCgroup(cgroups, list(label.get("controllers") or [])).remove()
            sweep_mounts(d)  # an overlay workspace's mount, left by a killed process
            force_rmtree(d)
            n += 1
    return n


def _reap_docker(run: str | None) -> int:
    """Containers of `run` and of dead processes of this host; 0 when no Docker engine answers here."""
    try:
        import docker as _docker_sdk  # noqa: F401 - a core dependency, but a node may lack the engine
    except ImportError:
        return 0
    from ..errors import SandboxError
    from .docker import client, remove_run, sweep_stale

    try:
        c = client(timeout=10)
    except SandboxError:
        return 0
    try:
        return sweep_stale(c) + (remove_run(c, run) if run is not None else 0)
    finally:
        c.close()

