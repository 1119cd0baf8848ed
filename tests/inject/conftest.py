"""Fixtures of the inject tests: two tiny repositories with a git history, and local sandboxes on them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssrkit.sandbox import SandboxOptions, open_sandbox
from ssrkit.source import RepoSource

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

#: the fixture repositories need no pytest plugins: skipping entry-point autoloading makes every run faster
OPTIONS = SandboxOptions(env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})


def local_sandbox(repo):
    """A local sandbox (the real backend) on a repository path or source."""
    source = repo if isinstance(repo, RepoSource) else RepoSource.local(repo)
    return open_sandbox(source, "local", OPTIONS)

CALC_OPS_V1 = '''"""Arithmetic helpers."""


def clamp(value, low, high):
    """Limit value to [low, high]."""
    if value < low:
        return low
    if value > high:
        return low
    return value


def total(items, start=0):
    result = start
    for item in items:
        result += item
    return result


def mean(items):
    if not items:
        raise ValueError("mean of nothing")
    return total(items) / len(items)
'''

CALC_OPS = CALC_OPS_V1.replace("""    if value > high:
        return low""", """    if value > high:
        return high""")

CALC_TEXT = '''def shout(text, mark="!"):
    if not text:
        return ""
    return text.upper() + mark


def initials(name, sep=""):
    parts = [p for p in name.split() if p]
    return sep.join(p[0].upper() for p in parts)
'''

CALC_TEST_OPS_V1 = '''import pytest

from calc.ops import clamp, mean, total


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-1, 0, 10) == 0


def test_clamp_edges():
    assert clamp(0, 0, 10) == 0
    assert clamp(10, 0, 10) == 10


def test_total():
    assert total([1, 2, 3]) == 6


def test_total_start():
    assert total([1], start=5) == 6


@pytest.mark.parametrize("items,expected", [([2], 2.0), ([1, 3], 2.0)])
def test_mean(items, expected):
    assert mean(items) == expected


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])
'''

CALC_TEST_OPS = CALC_TEST_OPS_V1 + '''

def test_clamp_high():
    # regression: large values came back as the lower bound
    assert clamp(11, 0, 10) == 10
'''

CALC_TEST_TEXT = '''from calc.text import initials, shout


class TestShout:
    def test_shout(self):
        assert shout("hi") == "HI!"

    def test_shout_mark(self):
        assert shout("hi", mark="?") == "HI?"

    def test_empty(self):
        assert shout("") == ""


def test_initials():
    assert initials("ada  lovelace") == "AL"


def test_initials_sep():
    assert initials("a b", sep=".") == "A.B"
'''

UNITS_OPS = '''def scale(values, factor):
    out = []
    for v in values:
        out.append(v * factor)
    return out


def first_positive(values):
    for v in values:
        if v > 0:
            return v
    return None


def between(x, low, high):
    return low <= x and x <= high
'''

UNITS_TEST = '''import unittest

from units.ops import between, first_positive, scale


class TestScale(unittest.TestCase):
    def test_scale(self):
        self.assertEqual(scale([1, 2], 3), [3, 6])

    def test_scale_empty(self):
        self.assertEqual(scale([], 3), [])


class TestFirstPositive(unittest.TestCase):
    def test_found(self):
        self.assertEqual(first_positive([-1, 0, 4, 5]), 4)

    def test_none(self):
        self.assertIsNone(first_positive([-1, 0]))


class TestBetween(unittest.TestCase):
    def test_inside(self):
        self.assertTrue(between(5, 0, 10))

    def test_edges(self):
        self.assertTrue(between(0, 0, 10))
        self.assertTrue(between(10, 0, 10))

    def test_outside(self):
        self.assertFalse(between(11, 0, 10))
'''


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
           "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00"}
    return subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=repo, env=env, check=True,
                          capture_output=True, text=True).stdout


def write_tree(repo: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = repo / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def commit_all(repo: Path, message: str) -> None:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)


@pytest.fixture(scope="session", autouse=True)
def _environment(tmp_path_factory):
    """Tests run `python` in sandboxes: make it this interpreter; keep caches private."""
    old = dict(os.environ)
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    os.environ["SSRKIT_CACHE"] = str(tmp_path_factory.mktemp("ssrkit-cache"))
    yield
    os.environ.clear()
    os.environ.update(old)


@pytest.fixture(scope="session")
def calc_repo(tmp_path_factory) -> Path:
    """pytest repository: calc/ops.py, calc/text.py; commit 2 fixes clamp and adds its regression test."""
    repo = tmp_path_factory.mktemp("calc")
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, {"calc/__init__.py": "", "calc/ops.py": CALC_OPS_V1, "calc/text.py": CALC_TEXT,
                      "tests/test_ops.py": CALC_TEST_OPS_V1, "tests/test_text.py": CALC_TEST_TEXT,
                      ".gitignore": "__pycache__/\n",
                      "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"})
    commit_all(repo, "Add calc")
    write_tree(repo, {"calc/ops.py": CALC_OPS, "tests/test_ops.py": CALC_TEST_OPS})
    commit_all(repo, "Fix clamp returning the lower bound for large values")
    return repo


@pytest.fixture(scope="session")
def units_repo(tmp_path_factory) -> Path:
    """unittest repository (TestCase classes only, tests/ is a package)."""
    repo = tmp_path_factory.mktemp("units")
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, {"units/__init__.py": "", "units/ops.py": UNITS_OPS, "tests/__init__.py": "",
                      "tests/test_ops.py": UNITS_TEST, ".gitignore": "__pycache__/\n"})
    commit_all(repo, "Add units")
    return repo


@pytest.fixture(scope="session")
def sandbox_factory():
    """A sandbox factory for `inject(..., sandbox_factory=...)`."""
    return local_sandbox
