"""`--executor ray`: one Ray task per unit, on whichever node has a free sandbox slot (docs/cluster.md).

Each node offers `ssrkit_sandbox` slots (`ray start --resources '{"ssrkit_sandbox": 8}'`); every task asks
for one, so a node never runs more sandboxes than it was sized for. Tasks lost with their node are
retried on another (`max_retries`). A local repository is packed once per run into the object store; each
node unpacks it once into its cache, keyed by the tarball's hash (`executor.unpacked_repo`).

Every task carries the driver's run id, so each sandbox it opens is labelled with the run
(`sandbox/_cleanup.py`). When a run starts, every node reaps the orphans of dead ssrkit processes
(`sandbox/reap.py`: a node may not open another sandbox soon, so its own sweep would not run). A driver's
Ctrl-C cancels the outstanding tasks (a running one gets KeyboardInterrupt, so its sandboxes close), waits
for them to end (killing the workers of those that do not within `CANCEL_GRACE_S`), then has every node
remove whatever sandbox of the run is left.

Needs the optional extra: ``pip install 'ssrkit[ray]'``.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections import Counter
from concurrent.futures import Future, InvalidStateError
from pathlib import Path
from typing import Any, Callable, TypeVar

from ..errors import SsrkitError
from ..sandbox._cleanup import run_id
from ..store.source import RepoSource
from .base import ArtifactRef, Executor, SourceRef, pack_tree

#: the custom resource that counts sandbox slots on a node
SLOT_RESOURCE = "ssrkit_sandbox"
#: how often a task lost with its node (or its worker process) is run again elsewhere
MAX_RETRIES = 4
#: how long cancelled tasks get to close their sandboxes before their workers are killed
CANCEL_GRACE_S = 20.0
#: how long the driver waits for the nodes' reapers
REAP_WAIT_S = 30.0
#: how long a cluster's address may take to accept a connection before the command says it is unreachable
CONNECT_TIMEOUT_S = 5.0
T = TypeVar("T")


def _import_ray():
    try:
        import ray
    except ImportError:
        raise SsrkitError("--executor ray needs the ray extra: pip install 'ssrkit[ray]' "
                          "(or run without --executor ray, on this machine)") from None
    return ray


def _run_unit(run: str, fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """What each Ray task runs: the unit, its sandboxes labelled with the driver's run; and the node it ran
    on (for `nodes_used`)."""
    import ray

    from ..sandbox._cleanup import set_run_id

    set_run_id(run)
    return ray.get_runtime_context().get_node_id(), fn(*args)


def _reap_node(run: str | None) -> tuple[str, int, int]:
    """On one node: orphans of dead ssrkit processes, and every sandbox of `run` when given."""
    import ray

    from ..sandbox.reap import reap

    got = reap(run)
    return ray.get_runtime_context().get_node_id(), got.local, got.containers


class RayExecutor(Executor):
    """Units as Ray tasks. `address` (else $RAY_ADDRESS) names a running cluster (HOST:PORT, ray://HOST:PORT,
    or auto: the one `ray start` registered here); without either, a one-node Ray of this command's own is
    started here with `slots` sandbox slots, and shut down on `close()`."""

    name = "ray"
    portable = True

    def __init__(self, slots: int = 1, *, address: str | None = None):
        super().__init__(slots)
        ray = _import_ray()
        self._ray = ray
        self._owned = False
        address = address or os.environ.get("RAY_ADDRESS") or None
        if not ray.is_initialized():
            if address:
                self._join(address)
            else:
                self._start(slots)
        total = ray.cluster_resources().get(SLOT_RESOURCE, 0)
        if total < 1:
            raise SsrkitError(f"the Ray cluster offers no {SLOT_RESOURCE!r} slots; start each node with "
                              f"ray start ... --resources '{{\"{SLOT_RESOURCE}\": N}}' (N sandboxes it may run)")
        # every slot of the cluster may be busy at once; --jobs caps it below that
        self.slots = int(total) if slots <= 1 else min(slots, int(total))
        # when the slots cap what runs, twice as many units are submitted: the extra ones wait in the
        # nodes' queues and start the moment a slot frees (under --jobs below the cluster's slots, the
        # driver's window is the only cap, so it stays at --jobs)
        self._window = self.slots * 2 if self.slots == int(total) else self.slots
        self._task = ray.remote(_run_unit).options(
            num_cpus=0, resources={SLOT_RESOURCE: 1}, max_retries=MAX_RETRIES, retry_exceptions=False,
            scheduling_strategy="SPREAD")
        self._refs: dict[Any, None] = {}  # outstanding tasks, in submission order
        self._lock = threading.Lock()
        self._sources: dict[RepoSource, SourceRef] = {}
        self.nodes_used: Counter[str] = Counter()
        #: the run every sandbox of these tasks is labelled with (`$SSRKIT_RUN`, else this process's id)
        self.run = run_id()
        #: what the last reap removed on the nodes: (local sandboxes, containers)
        self.reaped = (0, 0)
        self._startup_reap = self._reap_everywhere(None)  # not waited for: it only touches dead processes

    def _join(self, address: str) -> None:
        """Join the cluster at `address`, once something answers there: Ray itself retries an address
        nobody listens on for many minutes, printing a warning every few seconds."""
        target = reachable(address)
        try:  # something answers there; if it is no Ray, Ray gives up after about 20 s of warnings
            self._ray.init(address=address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise SsrkitError(f"could not join the Ray cluster at {target}: {' '.join(str(e).split())}; "
                              f"check --ray-address{_auth_hint(address)} (docs/cluster.md)") from None

    def _start(self, slots: int) -> None:
        """A one-node Ray of this command's own, even where `ray start` registered a cluster (Ray would join
        that one, and refuse the slots this one needs)."""
        registered = registered_cluster()
        if registered:
            print(f"ssrkit: note: a Ray cluster started with `ray start` is registered here ({registered}); this "
                  f"command starts a one-node Ray of its own (pass --ray-address auto to use that one)",
                  file=sys.stderr)
        try:
            self._ray.init(address="local", num_cpus=max(1, slots), resources={SLOT_RESOURCE: float(slots)},
                           include_dashboard=False, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise SsrkitError(f"could not start a one-node Ray here: {' '.join(str(e).split())}") from None
        self._owned = True

    @property
    def window(self) -> int:
        return self._window

    def submit(self, fn: Callable[..., T], *args: Any) -> "Future[T]":
        ref = self._task.remote(self.run, fn, *args)
        with self._lock:
            self._refs[ref] = None
        out: Future = Future()

        def done(f: Future) -> None:
            with self._lock:
                self._refs.pop(ref, None)
            try:
                node, result = f.result()
            except BaseException as e:  # noqa: BLE001 - handed on to the reader of `out`
                _settle(out, exception=_unwrap(self._ray, e))
                return
            with self._lock:
                self.nodes_used[node] += 1
            _settle(out, result=result)

        ref.future().add_done_callback(done)
        return out

    def cancel(self) -> None:
        """Cancel every outstanding task, wait for them to end, then remove the run's sandboxes on every
        node: nothing of the run is left running or on disk when this returns."""
        with self._lock:
            refs, self._refs = list(self._refs), {}
        if not refs:
            return
        self._cancel(refs, force=False)
        _, stuck = self._ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)
        if stuck:  # not interruptible in time (a unit blocked outside Python): kill their workers
            self._cancel(stuck, force=True)
            self._ray.wait(stuck, num_returns=len(stuck), timeout=CANCEL_GRACE_S)
        self.reaped = self._wait_reap(self._reap_everywhere(self.run))

    def _cancel(self, refs: list[Any], *, force: bool) -> None:
        for ref in refs:
            try:
                self._ray.cancel(ref, force=force, recursive=True)
            except Exception:  # noqa: BLE001 - already finished or gone with its node
                pass

    def _reap_everywhere(self, run: str | None) -> list[Any]:
        """A reaper task pinned to each live node (no sandbox slot: it opens no sandbox)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        reaper = self._ray.remote(_reap_node)
        refs = []
        for node in self._ray.nodes():
            if node.get("Alive"):
                refs.append(reaper.options(num_cpus=0, max_retries=0, scheduling_strategy=(
                    NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))).remote(run))
        return refs

    def _wait_reap(self, refs: list[Any]) -> tuple[int, int]:
        ready, _ = self._ray.wait(refs, num_returns=len(refs), timeout=REAP_WAIT_S)
        local = containers = 0
        for ref in ready:
            try:
                _, n_local, n_cont = self._ray.get(ref)
            except Exception:  # noqa: BLE001 - its node went away meanwhile: nothing left to reap there
                continue
            local, containers = local + n_local, containers + n_cont
        return local, containers

    def close(self) -> None:
        with self._lock:
            self._refs = {}
        if self._owned and self._ray.is_initialized():
            self._ray.shutdown()
            self._owned = False

    # inputs travel as data -------------------------------------------------------------------------
    def artifact_ref(self, path: Path, skip: tuple[str, ...] = ()) -> ArtifactRef:
        return ArtifactRef.pack(path, skip)

    def source_ref(self, source: RepoSource) -> SourceRef:
        """Images as they are; a local repository packed once (per run) into the object store."""
        if source.kind != "local":
            return SourceRef(source)
        with self._lock:
            ref = self._sources.get(source)
        if ref is None:
            data, digest = pack_tree(source.path or "")
            ref = SourceRef(source, digest, self._ray.put(data))
            with self._lock:
                ref = self._sources.setdefault(source, ref)
        return ref


def _auth_hint(address: str) -> str:
    """Why joining by address may fail where `auto` works: recent Ray authenticates with a token that
    `ray start --head` turns on by itself where ~/.ray/auth_token exists, but a driver given an explicit
    address sends it only with RAY_AUTH_MODE=token."""
    if address == "auto" or os.environ.get("RAY_AUTH_MODE"):
        return ""
    if not (os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").is_file()):
        return ""
    return ("; if the cluster authenticates with a token (`ray start` turns that on where ~/.ray/auth_token "
            "exists), set RAY_AUTH_MODE=token here, or use --ray-address auto on its head node")


def registered_cluster() -> str | None:
    """The address `ray start` registered on this machine ($RAY_TMPDIR/ray/ray_current_cluster), if any."""
    try:
        from ray._private.utils import read_ray_address
    except ImportError:  # moved in another Ray release: no note, no harm
        return None
    return read_ray_address() or None


def reachable(address: str) -> str:
    """The HOST:PORT `address` means ("auto": the cluster `ray start` registered on this machine), once a
    connection to it succeeds within CONNECT_TIMEOUT_S; else an SsrkitError saying what to do."""
    target = address.removeprefix("ray://")
    if target == "auto":  # only what `ray start` registered: never whichever Ray happens to run here
        target = registered_cluster() or ""
        if not target:
            raise SsrkitError("--ray-address auto: no Ray cluster is registered on this machine (`ray start "
                              "--head` registers one, in $RAY_TMPDIR/ray, default /tmp/ray); start one "
                              "(docs/cluster.md) or give its HOST:PORT")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        raise SsrkitError(f"--ray-address {address!r} is not HOST:PORT, ray://HOST:PORT or auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as e:
        why = (f"no answer within {CONNECT_TIMEOUT_S:g} s" if isinstance(e, socket.timeout)
               else f"nothing listens there ({e.strerror or e})")
        raise SsrkitError(f"could not reach the Ray cluster at {address}"
                          + (f" ({target})" if target != address else "")
                          + f": {why}; start it (ray start --head --port {port} --resources "
                          f"'{{\"{SLOT_RESOURCE}\": N}}', docs/cluster.md) or give the address `ray start` printed "
                          f"(--ray-address, $RAY_ADDRESS)") from None
    return target


def _settle(fut: Future, *, result: Any = None, exception: BaseException | None = None) -> None:
    """Hand a task's outcome to its future, unless the driver cancelled that future meanwhile."""
    try:
        if exception is not None:
            fut.set_exception(exception)
        else:
            fut.set_result(result)
    except InvalidStateError:
        pass


def _unwrap(ray: Any, e: BaseException) -> BaseException:
    """A unit's own error as itself (an SsrkitError stays one); a lost cluster as an actionable error."""
    if isinstance(e, ray.exceptions.RayTaskError):
        cause = getattr(e, "cause", None)
        if isinstance(cause, BaseException):
            return cause
    if isinstance(e, ray.exceptions.TaskCancelledError):
        return KeyboardInterrupt()
    if isinstance(e, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                      ray.exceptions.ObjectLostError)):
        return SsrkitError(f"a unit was lost {MAX_RETRIES + 1} times with its Ray worker or node "
                           f"({type(e).__name__}); check the cluster's nodes (ray status) and re-run: "
                           "finished units are kept")
    return e
