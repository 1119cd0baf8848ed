"""Path patterns for test-like and protected files (`tests/`, `test_*.py`, `conftest.py`, ...)."""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath


def matches(path: str, patterns: list[str]) -> bool:
    """True when `path` matches a pattern: `dir/` (glob) names a directory anywhere on the path; a pattern
    with an inner slash matches the whole path; any other pattern matches the file name anywhere."""
    p = PurePosixPath(path)
    for pat in patterns:
        if pat.endswith("/"):
            name = pat.rstrip("/")
            if "/" in name:
                if fnmatch.fnmatchcase(path, name + "/*"):
                    return True
            elif any(fnmatch.fnmatchcase(part, name) for part in p.parts[:-1]):
                return True
        elif "/" in pat:
            if fnmatch.fnmatchcase(path, pat):
                return True
        elif fnmatch.fnmatchcase(p.name, pat):
            return True
    return False
