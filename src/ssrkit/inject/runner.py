"""Test runners of Python repositories: detection, commands, test scripts and test ids.

A `Profile` says how a repository's tests run: `pytest` or `unittest`, with which interpreter and extra
arguments. It is detected from the repository (pytest configuration, test files importing pytest or only
unittest) and can be overridden by the `[inject]` section of `ssrkit.toml` (in the repository, or the
user's file):

    [inject]
    runner = "pytest"                 # or "unittest" (default: detected)
    python = "python3"                # interpreter (default "python")
    args = ["-p", "no:randomly"]      # extra arguments for every test command
    test_command = "python -m pytest" # replaces `python -m pytest` / `python -m unittest`
    discover = ["-s", "tests"]        # unittest: arguments of `discover` for the full-suite run
    exclude_tests = ["tests/test_net.py::test_download"]   # never selected (flaky, needs network)
    coverage_timeout = 600            # seconds for the whole suite under coverage (once per repository state;
                                      # a suite cut there keeps the tests that ran; one test running longer
                                      # than a third of [validate] timeout is cut and excluded, and a test
                                      # file whose tests took longer than it has the rest skipped)
    screen_timeout = 20               # seconds per pre-screen / bug run (default: 3 × what its tests took
                                      # under coverage, at least 10, at most 3 × the suite)

Test ids are those of the artifact parsers (`ssrkit/templates/*_parser.py`): pytest node ids
(`tests/test_a.py::TestX::test_y[p]`) and unittest ids (`tests.test_a.TestX.test_y`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from importlib import resources
from pathlib import PurePosixPath
from typing import Any, ClassVar

from ..errors import SsrkitError
from ..store.config import setting
from ..sandbox import timeouts
from ..sandbox.base import Sandbox

PYTEST = "pytest"
UNITTEST = "unittest"
RUNNERS = (PYTEST, UNITTEST)


@dataclass
class Profile:
    runner: str
    python: str = "python"
    args: list[str] = field(default_factory=list)
    test_command: str | None = None
    discover: list[str] = field(default_factory=list)
    exclude_tests: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return self.test_command or f"{self.python} -m {self.runner}"

    def _args(self) -> str:
        return " ".join(shlex.quote(a) for a in self.args)

    # -- commands --------------------------------------------------------------------------------
    def full_command(self) -> str:
        """Runs the whole suite the way the repository configures it (for the per-test coverage map).

        A test module that errors at collection does not stop the others (it is excluded later)."""
        if self.runner == PYTEST:
            return _join(self.base, "-p no:cacheprovider -q --continue-on-collection-errors", self._args())
        discover = " ".join(shlex.quote(a) for a in self.discover)
        return _join(self.base, "discover -v", discover, self._args()) + " 2>&1"

    def script(self, test_files: list[str], deselect: list[str] = ()) -> str:
        """test_script.sh running exactly `test_files` with a per-test log for the runner's parser."""
        files = " ".join(shlex.quote(f) for f in test_files)
        if self.runner == PYTEST:
            desel = " ".join(f"--deselect {shlex.quote(t)}" for t in sorted(deselect))
            cmd = _join(self.base, "-rA -p no:cacheprovider", self._args(), desel, files)
        else:
            modules = " ".join(shlex.quote(module_of(f)) for f in test_files)
            cmd = _join(self.base, "-v", self._args(), modules) + " 2>&1"
        return f"#!/usr/bin/env bash\n{cmd}\n"

    def failfast_command(self, test_ids: list[str], maxfail: int = 1) -> str:
        """Runs the given tests in the order given, stopping at the first failure (the cheap pre-screen), or
        after `maxfail` failures (pytest only); the failures are listed for the runner's parser."""
        ids = " ".join(shlex.quote(t) for t in test_ids)
        if self.runner == PYTEST:
            stop = "-x" if maxfail <= 1 else f"--maxfail={maxfail}"
            return _join(self.base, f"{stop} -q -rfE -p no:cacheprovider", self._args(), ids)
        return _join(self.base, "--failfast -q", self._args(), ids) + " 2>&1"

    def parser(self) -> str:
        """The text of the parser template for this runner (copied into artifacts as test_parser.py)."""
        return parser_template(self.runner)


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def parser_template(runner: str) -> str:
    name = {PYTEST: "pytest_parser.py", UNITTEST: "unittest_parser.py"}[runner]
    return resources.files("ssrkit.templates").joinpath(name).read_text(encoding="utf-8")


def module_of(path: str) -> str:
    """`tests/test_a.py` -> `tests.test_a`."""
    p = PurePosixPath(path)
    return ".".join([*p.parent.parts, p.stem]) if str(p.parent) != "." else p.stem


# -- detection ---------------------------------------------------------------------------------------

_PYTEST_USE = re.compile(r"^\s*(import pytest|from pytest\b|from _pytest\b)|^def test_\w*\(|^\s*@pytest\.", re.M)
_UNITTEST_USE = re.compile(r"^\s*(import unittest|from unittest\b)", re.M)


def list_python_files(sandbox: Sandbox) -> list[str]:
    """Python files of the repository (tracked and untracked, not ignored), repository-relative, sorted."""
    res = sandbox.run("git ls-files -z -c -o --exclude-standard -- '*.py' 2>/dev/null", timeout=timeouts.WHOLE_TREE)
    if res.ok and res.output.strip("\0\n"):
        files = [f for f in res.output.split("\0") if f.strip()]
    else:
        res = sandbox.run(r"find . -name '*.py' -not -path '*/.*' -not -path '*/node_modules/*' -print0",
                          timeout=timeouts.WHOLE_TREE)
        files = [f[2:] if f.startswith("./") else f for f in res.output.split("\0") if f.strip()]
    skip = ("site-packages/", "/.venv/", "venv/", ".tox/", "node_modules/")
    return sorted({f for f in files if not any(s in f"/{f}" for s in skip)})


def _read(sandbox: Sandbox, path: str) -> str:
    try:
        return sandbox.read_file(path).decode("utf-8", "replace")
    except OSError:  # missing, a directory, no permission, not a regular file
        return ""


def detect_runner(sandbox: Sandbox, py_files: list[str]) -> str:
    """pytest when the repository configures or uses it; unittest when its tests only use unittest."""
    if any(PurePosixPath(f).name == "conftest.py" for f in py_files):
        return PYTEST
    if _read(sandbox, "pytest.ini"):
        return PYTEST
    if "[tool.pytest" in _read(sandbox, "pyproject.toml"):
        return PYTEST
    if "[tool:pytest]" in _read(sandbox, "setup.cfg") or "[pytest]" in _read(sandbox, "tox.ini"):
        return PYTEST
    tests = [f for f in py_files if _looks_like_test_file(f)]
    uses_unittest = False
    for f in tests:
        text = _read(sandbox, f)
        if _PYTEST_USE.search(text):
            return PYTEST
        uses_unittest = uses_unittest or bool(_UNITTEST_USE.search(text))
    return UNITTEST if uses_unittest else PYTEST


def _looks_like_test_file(path: str) -> bool:
    name = PurePosixPath(path).name
    return name.startswith("test") and name.endswith(".py") or name.endswith("_test.py")


@dataclass
class InjectSettings:
    """`[inject]`: how the repository's tests run (a repository's own profile may set all of these) and the
    injectors' budgets; the LLM injector's endpoint is `agents.client.ModelSettings`."""

    SECTION: ClassVar[str] = "inject"

    runner: str = setting("auto", help=f"the test runner: {', '.join(RUNNERS)} or auto (detected)")
    python: str = setting("python", help="the interpreter that runs the tests")
    test_command: str = setting("", help="the command that runs the tests (default: PYTHON -m RUNNER)")
    args: str | list[str] = setting(factory=list, help="more arguments for the runner (a list, or one "
                                    "shell-quoted string)")
    discover: str | list[str] = setting(factory=list, help="unittest discover's arguments")
    exclude_tests: str | list[str] = setting(factory=list, help="tests never run (ids or files)")
    coverage_timeout: float = setting(0.0, help="seconds for the whole suite under coverage (0: 600)")
    screen_timeout: float = setting(0.0, help="seconds per pre-screening run of a mutant (0: from the tests' "
                                              "own time)")


def load_profile(sandbox: Sandbox, section: dict[str, Any] | None, py_files: list[str] | None = None) -> Profile:
    """The repository's profile: `[inject]` settings over what is detected."""
    section = dict(section or {})
    runner = section.get("runner") or "auto"
    if runner == "auto":
        runner = detect_runner(sandbox, py_files if py_files is not None else list_python_files(sandbox))
    if runner not in RUNNERS:
        raise SsrkitError(f"[inject] runner must be one of {', '.join(RUNNERS)} or 'auto', not {runner!r}")

    def str_list(key: str) -> list[str]:
        value = section.get(key) or []
        if isinstance(value, str):
            value = shlex.split(value)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SsrkitError(f"[inject] {key} must be a list of strings")
        return list(value)

    return Profile(
        runner=runner,
        python=str(section.get("python") or "python"),
        args=str_list("args"),
        test_command=section.get("test_command") or None,
        discover=str_list("discover"),
        exclude_tests=str_list("exclude_tests"),
    )


# -- test ids ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TestLocation:
    """Where a test is defined: file, enclosing classes, function name (parameters dropped)."""

    __test__ = False  # not a pytest test class

    file: str
    classes: tuple[str, ...]
    name: str


def locate_test(test_id: str, runner: str, test_files: dict[str, str] | None = None,
                candidates: list[str] | None = None) -> TestLocation | None:
    """The definition of a test id; None for ids that name no test function (collection errors, setUpClass).

    `test_files` maps known ids to their file (from the coverage map); `candidates` are files the test may
    live in (for unittest ids whose module cannot be told from the id alone).
    """
    if runner == PYTEST or "::" in test_id:
        parts = test_id.split("::")
        if len(parts) < 2:
            return None
        name = re.sub(r"\[.*\]$", "", parts[-1])
        return TestLocation(parts[0], tuple(parts[1:-1]), name)
    m = re.match(r"^(\w+) \(([\w.]+)\)$", test_id)  # "test_x (pkg.mod.Class)" forms
    if m:
        test_id = m.group(2) if m.group(2).endswith("." + m.group(1)) else f"{m.group(2)}.{m.group(1)}"
    dotted = test_id.split(".")
    file = (test_files or {}).get(test_id)
    if file is None:
        for f in candidates or ():
            mod = module_of(f).split(".")
            if dotted[: len(mod)] == mod:
                file = f
                break
    if file is None:
        return None
    mod = module_of(file).split(".")
    rest = dotted[len(mod):] if dotted[: len(mod)] == mod else dotted[-2:]
    if len(rest) < 2 or rest[-1] in ("setUpClass", "tearDownClass", "setUpModule", "tearDownModule"):
        return None
    return TestLocation(file, tuple(rest[:-1]), rest[-1])
