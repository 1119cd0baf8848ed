"""A tiny repository with a two-function bug, built in a temp dir: the fixture of the grading tests."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from fixtures.repos import git
from ssrkit.artifact import Metadata, create_artifact
from ssrkit.source import RepoSource

OPS = '''\
"""Small numeric helpers."""


def add(a, b):
    return a + b


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def mean(xs):
    if not xs:
        raise ValueError("mean of an empty sequence")
    return sum(xs) / len(xs)


def median(xs):
    s = sorted(xs)
    n = len(s)
    if n == 0:
        raise ValueError("median of an empty sequence")
    mid = n // 2
    if n % 2:
        return s[mid]
    return (s[mid - 1] + s[mid]) / 2
'''

TESTS = '''\
import pytest

from calc.ops import add, clamp, mean, median


def test_add():
    assert add(2, 3) == 5


def test_add_negative():
    assert add(-2, -3) == -5


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(15, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_mean(numbers):
    assert mean(numbers) == 2


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_median_odd(numbers):
    assert median(numbers) == 2


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
'''

CONFTEST = '''\
import pytest


@pytest.fixture
def numbers():
    return [3, 1, 2]
'''

PYPROJECT = '''\
[project]
name = "calc"
version = "1.0"

[tool.pytest.ini_options]
pythonpath = ["src"]
'''

PARSER = r'''
import json
import re
import sys

out = {}
for line in sys.stdin:
    m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", line)
    if not m or m.group(1) == "SKIPPED":
        continue
    status = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "error",
              "XFAIL": "skipped"}[m.group(1)]
    out[m.group(2)] = status
print(json.dumps(out))
'''

F2P = ["tests/test_ops.py::test_clamp_high", "tests/test_ops.py::test_median_even"]
ALL_TESTS = [f"tests/test_ops.py::{n}" for n in (
    "test_add", "test_add_negative", "test_clamp_low", "test_clamp_high", "test_clamp_inside", "test_mean",
    "test_mean_empty", "test_median_odd", "test_median_even")]


def make_repo(path: Path) -> Path:
    files = {
        ".gitignore": "__pycache__/\n.pytest_cache/\n",
        "pyproject.toml": PYPROJECT,
        "src/calc/__init__.py": '"""calc."""\n',
        "src/calc/ops.py": OPS,
        "tests/conftest.py": CONFTEST,
        "tests/test_ops.py": TESTS,
    }
    for rel, text in files.items():
        p = path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "calc")
    return path


def diff_of(repo: Path, edits: dict[str, str | None]) -> str:
    """The git diff that makes `edits` (path → new text, None = delete) to `repo`, which is left unchanged."""
    for rel, text in edits.items():
        p = repo / rel
        if text is None:
            p.unlink()
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
    git(repo, "add", "-A", "-N", ".")
    out = git(repo, "diff", "--binary", "HEAD")
    git(repo, "reset", "-q")
    git(repo, "checkout", "-q", "--", ".")
    git(repo, "clean", "-qfd")
    return out


BUGGY_OPS = OPS.replace("    if x > hi:\n        return hi\n", "    if x > hi:\n        return x\n").replace(
    "    return (s[mid - 1] + s[mid]) / 2\n", "    return s[mid]\n")
WEAK_TESTS = TESTS.replace('''

def test_clamp_high():
    assert clamp(15, 0, 10) == 10
''', "").replace('''

def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5
''', "")



def make_artifact(path: Path, repo: Path, select: str = "") -> "Artifact":
    """The artifact of BUGGY_OPS and WEAK_TESTS; `select`: pytest arguments before the test file (`-k ...`)."""
    bug = diff_of(repo, {"src/calc/ops.py": BUGGY_OPS})
    weaken = diff_of(repo, {"tests/test_ops.py": WEAK_TESTS})
    return create_artifact(
        path, bug_diff=bug, weaken_diff=weaken,
        test_script=f"#!/bin/bash\nexport PYTEST_DISABLE_PLUGIN_AUTOLOAD=1\n{sys.executable} -m pytest -rA -p no:cacheprovider {select}{' ' if select else ''}tests/test_ops.py\n",
        test_files=["tests/test_ops.py"], test_parser=textwrap.dedent(PARSER).lstrip(),
        metadata=Metadata(repo=RepoSource.local(repo), strategy="manual"))
