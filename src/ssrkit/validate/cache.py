"""The original-run cache: the original code's run depends only on (repository state, environment,
test_script.sh, test_parser.py, timeout), so it is kept on disk and shared by every artifact with the same key."""

from __future__ import annotations

import hashlib
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .. import __version__
from ..store.cache import original_runs_dir
from ..store.fsutil import atomic_write_json, atomic_write_text, read_json


def cache_dir() -> Path:
    """Where original-code runs are cached (`store.cache`)."""
    return original_runs_dir()


class OriginalRunCache:
    """Original-code runs keyed by (repository state, test script, parser, timeout); in memory and on disk."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._mem: dict[str, dict[str, Any]] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(fingerprint: str, environment: str, script: str, parser: str, timeout: float) -> str:
        """`fingerprint`: the repository state; `environment`: what the commands run with (`environment_key`)."""
        h = hashlib.sha256()
        for part in (fingerprint, environment, script, parser, f"{timeout:g}", __version__):
            h.update(part.encode("utf-8", "replace") + b"\0")
        return h.hexdigest()[:32]

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Artifacts sharing a key wait for the first one's run instead of repeating it."""
        with self._guard:
            lk = self._locks.setdefault(key, threading.Lock())
        with lk:
            yield

    def get(self, key: str) -> dict[str, Any] | None:
        if not self.enabled:
            return None
        if key in self._mem:
            self.hits += 1
            return self._mem[key]
        p = cache_dir() / f"{key}.json"
        if p.is_file():
            try:
                entry = read_json(p)
                entry["log"] = (cache_dir() / f"{key}.log").read_text(encoding="utf-8")
            except (OSError, ValueError):
                return None
            self._mem[key] = entry
            self.hits += 1
            return entry
        return None

    def put(self, key: str, entry: dict[str, Any]) -> None:
        self.misses += 1
        if not self.enabled:
            return
        self._mem[key] = entry
        try:
            d = cache_dir()
            d.mkdir(parents=True, exist_ok=True)
            atomic_write_text(d / f"{key}.log", entry["log"])
            atomic_write_json(d / f"{key}.json", {k: v for k, v in entry.items() if k != "log"})
        except OSError:
            pass  # the cache is an optimization; a read-only home must not fail validation
