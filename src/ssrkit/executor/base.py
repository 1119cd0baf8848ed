"""Where units of work run: the executor seam, shards, and what a unit carries to another machine.

A *unit* is one independent piece of sandbox work — validate one artifact, run and grade one solver attempt,
combine one artifact's failed fixes (higher-order), run one LLM injection, evaluate one procedural candidate.
Commands hand their units to an `Executor`: `submit(fn, *args)` returns a `concurrent.futures.Future`,
results stream back as they finish, `cancel()` drops whatever has not finished. Two implementations:

* `LocalExecutor` (the default): the thread pool `--jobs` always meant; with one job a unit runs inline.
* `RayExecutor` (`--executor ray`, in `executor/ray.py`, the `ssrkit[ray]` extra): one Ray task per unit.

The driver stays the only writer of artifact directories: a unit that may run elsewhere takes its inputs as
data (`ArtifactRef`, `SourceRef`) and returns its outputs as data, which the driver writes with the same
atomic writes as a local run. `portable` tells a command which kind it got.

`Shard` is the engine-free way to split a round: `--shard K/N` keeps the units whose key (an artifact id, an
injection index) falls in shard K of N, so N batch jobs (a Slurm array, a Kubernetes Indexed Job) each do
a disjoint part and write disjoint artifact folders.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import tarfile
import tempfile
import threading
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, is_dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from ..errors import SsrkitError
from ..store.cache import node_repos_dir
from ..store.fsutil import read_tree, write_tree  # noqa: F401 - the executor hands them to its units
from ..store.source import RepoSource


EXECUTORS = ("local", "ray")
T = TypeVar("T")


# -- the seam ------------------------------------------------------------------------------------------

class Executor(ABC):
    """Runs units; at most `slots` of them at once."""

    name = "executor"
    #: units cross a process boundary: their arguments are pickled and they must not touch driver paths
    portable = False

    def __init__(self, slots: int):
        if slots < 1:
            raise SsrkitError("--jobs must be at least 1")
        self.slots = slots

    @property
    def window(self) -> int:
        """How many units `stream_units` keeps submitted at once: `slots` unless the executor itself caps
        how many run (then a few more wait queued where they run, so a freed slot starts the next unit
        without waiting for a round trip to the driver)."""
        return self.slots

    @abstractmethod
    def submit(self, fn: Callable[..., T], *args: Any) -> "Future[T]":
        """Start `fn(*args)`; the future holds its result (or its exception)."""

    @abstractmethod
    def cancel(self) -> None:
        """Drop every unit that has not finished (Ctrl-C, a fatal error)."""

    def close(self) -> None:
        """Release what the executor holds (threads, a Ray connection it made)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            self.cancel()
        self.close()

    # what a unit takes to where it runs (identity for an in-process executor)
    def artifact_ref(self, path: Path, skip: tuple[str, ...] = ()) -> "ArtifactRef":
        """`skip`: top-level folders the unit does not need (when the artifact travels)."""
        return ArtifactRef(str(path))

    def source_ref(self, source: RepoSource) -> "SourceRef":
        return SourceRef(source)


class LocalExecutor(Executor):
    """The thread pool on this machine; with one slot a unit runs inline, in the caller's thread."""

    name = "local"

    def __init__(self, slots: int = 1):
        super().__init__(slots)
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], *args: Any) -> "Future[T]":
        if self.slots == 1:
            fut: Future = Future()
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed to whoever reads the future
                if isinstance(e, (KeyboardInterrupt, SystemExit)):
                    raise
                fut.set_exception(e)
            return fut
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.slots, thread_name_prefix="ssrkit-unit")
        return self._pool.submit(fn, *args)

    def cancel(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def run_units(executor: Executor, fn: Callable[..., T], arglists: list[tuple[Any, ...]],
              on_result: Callable[[int, T], None] | None = None) -> list[T]:
    """`fn(*args)` for every args in `arglists`, at most `executor.slots` running; results in input order.

    `on_result(index, result)` is called in the caller's thread as each one finishes. The first exception
    cancels the rest and is raised; so does Ctrl-C.
    """
    results: dict[int, T] = {}
    for i, res in stream_units(executor, fn, arglists):
        results[i] = res
        if on_result is not None:
            on_result(i, res)
    return [results[i] for i in range(len(arglists))]


def stream_units(executor: Executor, fn: Callable[..., T],
                 arglists: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, T]]:
    """(index, result) in the order the units finish, keeping at most `executor.window` submitted."""
    pending = iter(enumerate(arglists))
    inflight: dict[Future, int] = {}
    window = max(1, executor.window)
    try:
        while True:
            while len(inflight) < window:
                nxt = next(pending, None)
                if nxt is None:
                    break
                inflight[executor.submit(fn, *nxt[1])] = nxt[0]
            if not inflight:
                return
            done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: inflight[f]):
                i = inflight.pop(fut)
                yield i, fut.result()
    except BaseException:
        for fut in inflight:
            fut.cancel()
        executor.cancel()
        raise


# -- shards ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shard:
    """Shard `k` (1-based) of `n`: the units whose key hashes to it."""

    k: int
    n: int

    @classmethod
    def parse(cls, text: str | None) -> "Shard | None":
        if text is None or str(text).strip() == "":
            return None
        raw = str(text).strip()
        try:
            k_s, n_s = raw.split("/")
            k, n = int(k_s), int(n_s)
        except ValueError:
            raise SsrkitError(f"--shard {raw!r}: expected K/N, e.g. --shard 2/4 (shard 2 of 4)") from None
        if n < 1 or not 1 <= k <= n:
            raise SsrkitError(f"--shard {raw!r}: K must be between 1 and N (got K={k}, N={n})")
        return cls(k, n)

    def owns(self, key: str) -> bool:
        """Whether the unit with this key (an artifact id) belongs to this shard."""
        h = int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")
        return h % self.n == self.k - 1

    def owns_index(self, i: int) -> bool:
        """Whether the i-th unit of a numbered sequence (injections 0..n-1, a stream's candidates) is ours."""
        return i % self.n == self.k - 1

    def share(self, total: int) -> int:
        """This shard's part of `total` (the parts of all N shards add up to `total`)."""
        base, extra = divmod(total, self.n)
        return base + (1 if self.k <= extra else 0)

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"


def shard_items(items: list[T], shard: Shard | None, key: Callable[[T], str]) -> list[T]:
    return items if shard is None else [x for x in items if shard.owns(key(x))]


# -- what a unit carries ---------------------------------------------------------------------------------

@dataclass
class ArtifactRef:
    """An artifact as a unit gets it: a path on this machine, or (portable) its files as bytes."""

    origin: str  # the artifact's directory on the driver
    files: dict[str, bytes] | None = None  # relative path → content, when it travels

    @classmethod
    def pack(cls, path: Path, skip: tuple[str, ...] = ()) -> "ArtifactRef":
        root = Path(path)
        files: dict[str, bytes] = {}
        for p in sorted(root.rglob("*")):
            rel = p.relative_to(root)
            if p.is_file() and rel.parts[0] not in skip and not any(part.startswith(".") for part in rel.parts):
                files[rel.as_posix()] = p.read_bytes()
        return cls(str(root), files)

    def materialize(self, scratch: Path) -> Path:
        """The directory to work on: the origin itself, or the files written under `scratch`."""
        if self.files is None:
            return Path(self.origin)
        d = Path(scratch) / Path(self.origin).name
        for rel, data in self.files.items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        d.mkdir(parents=True, exist_ok=True)
        return d


@dataclass
class SourceRef:
    """A repository as a unit gets it. Images are used as they are on each node's engine; a local
    repository travels as one tarball (in Ray's object store, `blob`) unpacked once per node."""

    source: RepoSource
    digest: str = ""  # sha256 of the tarball, when it travels
    blob: Any = None  # the tarball, or an object-store reference to it

    def materialize(self) -> RepoSource:
        if self.source.kind != "local" or not self.digest:
            return self.source
        return RepoSource.local(unpacked_repo(self.digest, self.blob, Path(self.source.path).name))


def pack_tree(path: str | Path) -> tuple[bytes, str]:
    """A deterministic tarball of a directory as it is on disk (ignored files and .git included)."""
    root = Path(path)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in [*sorted(dirnames), *sorted(filenames)]:
                full = Path(dirpath) / name
                info = tar.gettarinfo(str(full), arcname=full.relative_to(root).as_posix())
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                if info.isreg():
                    with open(full, "rb") as fh:
                        tar.addfile(info, fh)
                elif info.isdir() or info.issym():
                    tar.addfile(info)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def node_cache() -> Path:
    """Where a node keeps unpacked repositories (`store.cache`: `$SSRKIT_CACHE/repos`, else ~/.cache/ssrkit/repos)."""
    return node_repos_dir()


_unpack_lock = threading.Lock()


def unpacked_repo(digest: str, blob: Any, name: str) -> Path:
    """The repository of tarball `digest` on this node, unpacked on first use (atomically)."""
    dest = node_cache() / digest[:32] / name
    if dest.is_dir():
        return dest
    with _unpack_lock:
        if dest.is_dir():
            return dest
        data = _resolve_blob(blob)
        if hashlib.sha256(data).hexdigest() != digest:
            raise SsrkitError(f"the repository tarball {digest[:12]} arrived damaged")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".unpack-", dir=dest.parent))
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                tar.extractall(tmp / name, filter="tar")
            try:
                os.rename(tmp / name, dest)
            except OSError:
                if not dest.is_dir():  # another process on this node won the race: use its copy
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _resolve_blob(blob: Any) -> bytes:
    if isinstance(blob, (bytes, bytearray)):
        return bytes(blob)
    import ray  # an object-store reference: only ever made by RayExecutor

    return ray.get(blob)


# -- paths a unit saw, as the driver names them ------------------------------------------------------

def relabel(obj: Any, mapping: dict[str, str]) -> Any:
    """`obj` with every occurrence of each key replaced by its value in every string it holds
    (dataclasses, dicts, lists), so a result computed on a node's scratch copy names the driver's paths."""
    mapping = {k: v for k, v in mapping.items() if k and k != v}
    if not mapping:
        return obj

    def fix(x: Any) -> Any:
        if isinstance(x, str):
            for old, new in mapping.items():
                x = x.replace(old, new)
            return x
        if isinstance(x, dict):
            return {fix(k): fix(v) for k, v in x.items()}
        if isinstance(x, list):
            return [fix(v) for v in x]
        if isinstance(x, tuple):
            return tuple(fix(v) for v in x)
        if is_dataclass(x) and not isinstance(x, type):
            return replace(x, **{f.name: fix(getattr(x, f.name)) for f in fields(x) if f.init})
        return x

    return fix(obj)


@dataclass
class Scratch:
    """A temporary directory for one portable unit (removed when the unit ends)."""

    prefix: str = "ssrkit-unit-"
    path: Path = field(init=False)

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(prefix=self.prefix))
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
