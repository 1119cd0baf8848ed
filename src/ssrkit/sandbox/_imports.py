"""Import roots of a Python repository: the directories its own packages are imported from (SPEC §3).

The code under test must be the workspace's, also when a copy of the same package is installed
(non-editable) in the environment. The sandbox puts these directories first on PYTHONPATH, ahead of
site-packages: the repository root, `src/` when it exists, and the directories its packaging
configuration declares (setuptools `package-dir` / `packages.find.where`, hatch wheel `packages`,
poetry `packages.from`, pdm `package-dir`; setup.cfg `package_dir` / `where`; a literal
`package_dir={"": "lib"}` in setup.py).

Run as a script inside a sandbox (`python _imports.py ROOT...`) it prints, as JSON, where that Python
imports each top-level package of those roots from, so a caller can verify that it is the workspace's copy.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import sys
from typing import Any

_SETUP_PY_DIR = re.compile(r"""package_dir\s*=\s*\{\s*['"]{2}\s*:\s*['"]([^'"]+)['"]""")


def import_roots(repo: str) -> list[str]:
    """Repository-relative import roots, "." first; only directories that exist, no duplicates."""
    found = [".", "src", *_declared(repo)]
    out: list[str] = []
    for rel in found:
        rel = os.path.normpath(rel.strip().strip("/") or ".")
        if rel.startswith("..") or os.path.isabs(rel) or rel in out:
            continue
        if os.path.isdir(os.path.join(repo, rel)):
            out.append(rel)
    return out


def _declared(repo: str) -> list[str]:
    import tomllib

    out: list[str] = []
    try:
        with open(os.path.join(repo, "pyproject.toml"), "rb") as fh:
            tool = tomllib.load(fh).get("tool", {})
    except (OSError, ValueError):
        tool = {}
    st = _dict(tool.get("setuptools"))
    pkg_dir = _dict(st.get("package-dir"))
    if isinstance(pkg_dir.get(""), str):
        out.append(pkg_dir[""])
    where = _dict(_dict(st.get("packages")).get("find")).get("where")
    out += [w for w in (where if isinstance(where, list) else [where]) if isinstance(w, str)]
    wheel = _dict(_dict(_dict(_dict(tool.get("hatch")).get("build")).get("targets")).get("wheel"))
    for p in wheel.get("packages") or []:
        if isinstance(p, str) and "/" in p.strip("/"):
            out.append(os.path.dirname(p.strip("/")))
    for p in _dict(tool.get("poetry")).get("packages") or []:
        if isinstance(p, dict) and isinstance(p.get("from"), str):
            out.append(p["from"])
    pdm = _dict(_dict(tool.get("pdm")).get("build")).get("package-dir")
    if isinstance(pdm, str):
        out.append(pdm)
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read(os.path.join(repo, "setup.cfg"), encoding="utf-8")
    except (OSError, configparser.Error, UnicodeDecodeError):
        pass
    if cfg.has_option("options", "package_dir"):
        for line in re.split(r"[\n,]", cfg.get("options", "package_dir")):
            key, sep, value = line.partition("=")
            if sep and not key.strip():
                out.append(value)
    if cfg.has_option("options.packages.find", "where"):
        out.append(cfg.get("options.packages.find", "where"))
    try:
        with open(os.path.join(repo, "setup.py"), encoding="utf-8", errors="replace") as fh:
            out += _SETUP_PY_DIR.findall(fh.read())
    except OSError:
        pass
    return out


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def top_level_names(repo: str, roots: list[str], skip: tuple[str, ...] = ()) -> list[str]:
    """Importable top-level packages and modules of the repository's import roots (not tests, not setup.py)."""
    names: set[str] = set()
    for rel in roots:
        base = os.path.join(repo, rel)
        try:
            entries = sorted(os.listdir(base))
        except OSError:
            continue
        for name in entries:
            full = os.path.join(base, name)
            if name.startswith((".", "_")) or name in skip:
                continue
            if os.path.isdir(full) and os.path.isfile(os.path.join(full, "__init__.py")) and name.isidentifier():
                names.add(name)
            elif name.endswith(".py") and name[:-3].isidentifier() and name not in ("setup.py", "conftest.py",
                                                                                  "noxfile.py"):
                names.add(name[:-3])
    return sorted(n for n in names if not (n.startswith("test") or n.endswith("_test") or n in
                                           ("tests", "testing", "docs", "examples", "benchmarks")))


def origins(roots: list[str]) -> dict[str, str | None]:
    """Where this interpreter imports each top-level name of `roots` (absolute directories) from."""
    import importlib.util

    out: dict[str, str | None] = {}
    for name in top_level_names("/", roots):
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        where = None
        if spec is not None:
            where = spec.origin if spec.origin not in (None, "namespace") else \
                next(iter(spec.submodule_search_locations or []), None)
        out[name] = os.path.realpath(where) if where else None
    return out


if __name__ == "__main__":
    print(json.dumps(origins(sys.argv[1:])))
