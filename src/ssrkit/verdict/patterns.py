"""Path patterns: which files are test-like (`[validate] test_patterns`), which are protected when a fix is
graded (`[solve] protected`), and which would shadow a module the tests import (a new `argparse.py` at an import
root runs before any test).
"""

from __future__ import annotations

import fnmatch
import sys
from pathlib import PurePosixPath
from typing import Callable

DEFAULT_TEST_PATTERNS = ["tests/", "test/", "testing/", "test_*.py", "*_test.py", "conftest.py"]


#: Files restored to their original content (or deleted when a fix adds them) before a fix is graded: the files
#: that steer the test runner, the interpreter's start-up hooks, and modules that would shadow the runner itself.
#: A pattern with a slash at the end names a directory anywhere (globs allowed); one without, a file name anywhere.
DEFAULT_PROTECTED = [
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
    "pyproject.toml", "noxfile.py",
    "sitecustomize.py", "usercustomize.py", "*.pth",
    "pytest.py", "pytest/", "_pytest/", "py.py", "pluggy/", "unittest.py", "unittest/",
    "*.egg-info/", "*.dist-info/", "*.egg-link", "__pycache__/", "*.pyc", "*.so", "*.pyd",
]


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


def is_test_like(path: str, patterns: list[str]) -> bool:
    """True when `path` looks like a test file (see `matches` for the pattern rules)."""
    return matches(path, patterns)


#: Top-level names a fix may not add at an import root: the standard library and the runner's own packages.
RUNNER_MODULES = frozenset({
    "pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli", "colorama",
    "pygments", "xdist", "pytest_timeout", "coverage", "nose", "nose2", "hypothesis", "_hypothesis_pytestplugin",
})
#: what a new top-level file must not be named: this python's standard library, and the runner's packages (an
#: exported grader is given the exporting ssrkit's set, whatever python its task image has)
SHADOW_NAMES = frozenset(getattr(sys, "stdlib_module_names", ())) | RUNNER_MODULES
IMPORT_ROOTS = ("", "src")


def shadowed_module(path: str, shadow_names: frozenset[str] = SHADOW_NAMES) -> str | None:
    """The standard-library or runner module (of `shadow_names`) a file at `path` would shadow, if it sits at an
    import root."""
    parts = PurePosixPath(path).parts
    for root in IMPORT_ROOTS:
        rparts = PurePosixPath(root).parts if root else ()
        if len(parts) <= len(rparts) or tuple(parts[:len(rparts)]) != rparts:
            continue
        rest = parts[len(rparts):]
        top = rest[0]
        if len(rest) == 1:
            if not top.endswith((".py", ".pyc", ".so", ".pyd")):
                continue
            top = top.split(".", 1)[0]
        if top in shadow_names:
            return top
    return None


def paths_to_restore(test_files: list[str], touched: list[str], fix_targets: list[str | None], patterns: list[str],
                     guard_shadows: bool, exists_originally: Callable[[str], bool],
                     shadow_names: frozenset[str] = SHADOW_NAMES) -> tuple[list[str], list[str]]:
    """What grading puts back before a fix's tests run: (the listed test files, then every path of `touched`
    (the files the bug, the weakening and the fix touch) that matches `patterns` (test-like or protected), each
    restored to its original content or deleted when it had none; the files the fix makes (`fix_targets`) that
    would shadow a module at an import root and did not exist originally, deleted — with `guard_shadows`)."""
    paths = list(test_files)
    for p in touched:
        if p not in paths and matches(p, patterns):
            paths.append(p)
    shadows: list[str] = []
    for p in fix_targets if guard_shadows else ():
        if p and p not in paths and p not in shadows and shadowed_module(p, shadow_names) \
                and not exists_originally(p):
            shadows.append(p)
    return paths, shadows
