"""Atomic file writes: a killed run never leaves a half-written file behind; directories ssrkit owns."""

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


def json_text(obj: Any, *, sort_keys: bool = False) -> str:
    """How ssrkit writes a JSON file (`atomic_write_json`): the keys in their order, unless `sort_keys`
    (a trainer's files, compared across runs)."""
    return json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False) + "\n"


def atomic_write_json(path: Path, obj: Any, *, sort_keys: bool = False) -> None:
    atomic_write_text(path, json_text(obj, sort_keys=sort_keys))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def own_dir(path: Path, what: str = "") -> Path:
    """`path`, a directory ssrkit makes, writes and deletes in (a staging area, an artifact it writes): absent,
    or a real directory. A symlink there (or a file) would steer those writes and deletes elsewhere, so it is
    refused, naming it; what it points to is never touched."""
    from ..errors import SsrkitError

    path = Path(path)
    label = f"{what} {path}" if what else str(path)
    if path.is_symlink():
        raise SsrkitError(f"{label} is a symlink (to {os.readlink(path)}); ssrkit writes and deletes only inside "
                          f"its output directory: remove the link (what it points to is left alone)")
    if path.exists() and not path.is_dir():
        raise SsrkitError(f"{label} is not a directory; remove it")
    return path


def read_tree(root: Path) -> dict[str, bytes]:
    """Every file under `root`, by relative path (what a portable unit sends back)."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_tree(root: Path, files: dict[str, bytes], *, last: tuple[str, ...] = ()) -> None:
    """Write a unit's files under `root` atomically, the names in `last` after every other one (so their
    presence means the rest is there: eval.json, validation.json, artifact.toml)."""
    root = Path(root)
    order = sorted(files, key=lambda rel: (rel in last, last.index(rel) if rel in last else 0, rel))
    for rel in order:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(p, files[rel])
