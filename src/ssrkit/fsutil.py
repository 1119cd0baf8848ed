"""Atomic file writes: a killed run never leaves a half-written file behind."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temporary sibling, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def json_text(obj: Any) -> str:
    """How ssrkit writes a JSON file (`atomic_write_json`)."""
    return json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json_text(obj))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))
