"""Per-test coverage: which tests execute which lines and functions of the code (SPEC §4).

The repository's whole suite runs once inside a sandbox under coverage.py with one dynamic context per test
(the test's id as the artifact parsers write it: a pytest node id or a unittest `module.Class.method`), and
each test's outcome is recorded. The result, a `TestMap`, is cached on disk per repository state and test
command, so a second `ssrkit inject` on the same repository starts at once.

The coverage helpers (`_cov/`) are copied into the sandbox's scratch directory and activated through a
`sitecustomize` module on PYTHONPATH, so any test command — the full suite here, an artifact's
`test_script.sh` in `repair` — gets per-test contexts without changes to the repository. When that Python
has no `coverage` of its own, ssrkit's copy (copied next to the helpers) is used; nothing is installed into
the user's environment. The map says which tracer measured it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Iterable

from .. import __version__
from ..errors import SsrkitError
from ..store.fsutil import atomic_write_json, read_json
from ..sandbox import timeouts
from ..sandbox.base import Sandbox
from ..testrun import PASSED
from ..store.cache import testmaps_dir
from ..verdict.patterns import is_test_like

def per_test_limit(timeout: float) -> float:
    """Seconds one test may run under coverage before the map cuts it: a third of one test run's budget
    (`timeout`, [validate] timeout), since every run of an artifact selecting it would spend that on it."""
    return timeout / 3

_HELPERS = ("sitecustomize.py", "ssrkit_cov.py", "ssrkit_cov_pytest.py", "dump.py")
_OMIT = ["*/.venv/*", "*/venv/*", "*/site-packages/*", "*/.tox/*", "*/node_modules/*"]


def helpers_version() -> str:
    h = hashlib.sha256()
    for name in _HELPERS:
        h.update(resources.files("ssrkit.mutation").joinpath("_cov").joinpath(name).read_bytes())
    return h.hexdigest()[:12]


@dataclass
class TestMap:
    """Tests, their outcomes and files, and the code lines each covers."""

    __test__ = False  # not a pytest test class

    contexts: list[str]
    files: dict[str, dict[int, list[int]]]  # code path -> context index -> covered lines
    outcomes: dict[str, str]  # test id -> passed / failed / skipped / error
    test_files: dict[str, str]  # test id -> repository-relative file
    seconds: float = 0.0
    doctests: set[str] = field(default_factory=set)  # ids of doctest items (not Python test functions)
    broken: dict[str, str] = field(default_factory=dict)  # test file that errored at collection -> why
    tracer: str = ""  # which coverage tracer measured the map, and whose coverage it was
    durations: dict[str, float] = field(default_factory=dict)  # test id -> seconds under coverage
    complete: bool = True  # False: the suite was cut at the coverage timeout; the map holds the tests that ran
    cut: set[str] = field(default_factory=set)  # tests interrupted at the per-test limit (recorded as failed)
    #: test files whose remaining tests were skipped once their passing tests had outlasted the per-file limit
    files_cut: set[str] = field(default_factory=set)
    _by_line: dict[str, dict[int, frozenset[int]]] = field(default_factory=dict, repr=False)

    # -- construction ----------------------------------------------------------------------------
    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TestMap":
        files = {p: {int(k): v for k, v in per.items()} for p, per in data["files"].items()}
        return cls(list(data["contexts"]), files, dict(data["outcomes"]), dict(data["test_files"]),
                   float(data.get("seconds", 0.0)), set(data.get("doctests", ())), dict(data.get("broken", {})),
                   str(data.get("tracer", "")), {k: float(v) for k, v in data.get("durations", {}).items()},
                   bool(data.get("complete", True)), set(data.get("cut", ())), set(data.get("files_cut", ())))

    def to_json(self) -> dict[str, Any]:
        return {"contexts": self.contexts, "files": {p: {str(k): v for k, v in per.items()} for p, per in self.files.items()},
                "outcomes": self.outcomes, "test_files": self.test_files, "seconds": round(self.seconds, 3),
                "doctests": sorted(self.doctests), "broken": self.broken, "tracer": self.tracer,
                "durations": self.durations, "complete": self.complete, "cut": sorted(self.cut),
                "files_cut": sorted(self.files_cut)}

    # -- queries ---------------------------------------------------------------------------------
    def passing(self) -> set[str]:
        return {t for t, s in self.outcomes.items() if s == PASSED}

    def lines_by_test(self, path: str) -> dict[int, frozenset[int]]:
        """line -> indices of the contexts covering it."""
        if path not in self._by_line:
            out: dict[int, set[int]] = {}
            for ctx, lines in self.files.get(path, {}).items():
                for line in lines:
                    out.setdefault(line, set()).add(ctx)
            self._by_line[path] = {k: frozenset(v) for k, v in out.items()}
        return self._by_line[path]

    def tests_covering(self, path: str, lines: Iterable[int], *, passing_only: bool = True) -> set[str]:
        by_line = self.lines_by_test(path)
        idx: set[int] = set()
        for line in lines:
            idx |= by_line.get(line, frozenset())
        tests = {self.contexts[i] for i in idx}
        if passing_only:
            tests = {t for t in tests if self.outcomes.get(t) == PASSED}
        return tests

    def covered_lines(self, path: str, *, passing_only: bool = True) -> set[int]:
        if not passing_only:
            return set(self.lines_by_test(path))
        ok = {i for i, c in enumerate(self.contexts) if self.outcomes.get(c) == PASSED}
        return {line for line, ctxs in self.lines_by_test(path).items() if ctxs & ok}

    def code_files(self, test_patterns: list[str]) -> list[str]:
        return sorted(p for p in self.files if p.endswith(".py") and not is_test_like(p, test_patterns))

    def file_of(self, test_id: str) -> str | None:
        f = self.test_files.get(test_id)
        if f is None and "::" in test_id:
            f = test_id.split("::")[0]
        return f

    def tests_in(self, test_file: str) -> set[str]:
        return {t for t in self.outcomes if self.file_of(t) == test_file}


# -- collection ----------------------------------------------------------------------------------

def install_helpers(sandbox: Sandbox) -> str:
    """Copy the coverage helpers, and ssrkit's own coverage package as a fallback (`vendor/`), into the
    sandbox's scratch directory; return that directory."""
    d = sandbox.scratch_path("ssrkit_cov")
    for name in _HELPERS:
        data = resources.files("ssrkit.mutation").joinpath("_cov").joinpath(name).read_bytes()
        sandbox.write_file(f"{d}/{name}", data)
    for rel, data in _coverage_package():
        sandbox.write_file(f"{d}/vendor/coverage/{rel}", data)
    return d


_COVERAGE_FILES: list[tuple[str, bytes]] | None = None


def _coverage_package() -> list[tuple[str, bytes]]:
    """The files of ssrkit's own coverage package: its modules and C tracer (not the HTML report assets)."""
    global _COVERAGE_FILES
    if _COVERAGE_FILES is None:
        import coverage

        root = os.path.dirname(os.path.abspath(coverage.__file__))
        files = []
        for name in sorted(os.listdir(root)):
            if name.endswith((".py", ".so", ".pyd", ".typed")):
                with open(os.path.join(root, name), "rb") as fh:
                    files.append((name, fh.read()))
        _COVERAGE_FILES = files
    return _COVERAGE_FILES


def coverage_env_prefix(sandbox: Sandbox, helper_dir: str, out_dir: str, test_limit: float = 0.0,
                        file_limit: float = 0.0) -> str:
    """Shell prefix that runs a command under per-test coverage writing into `out_dir`; with `test_limit`, a
    test running longer than that many seconds is interrupted and recorded as cut; with `file_limit`, a test
    file whose passing tests took longer than that has the rest of its tests skipped (`files_cut`)."""
    rc = f"{out_dir}/coveragerc"
    omit = ", ".join(_OMIT)
    sandbox.write_file(rc, f"[run]\ndata_file = {out_dir}/.coverage\nparallel = True\nsource = {sandbox.root}\n"
                           f"omit = {omit}\n")
    q = shlex.quote
    return (f"rm -f {q(out_dir)}/.coverage* {q(out_dir)}/outcomes-*.json; "
            f"unset COVERAGE_CORE; export COVERAGE_PROCESS_START={q(rc)} SSRKIT_COV_DIR={q(out_dir)} "
            f"SSRKIT_COV_VENDOR={q(helper_dir + '/vendor')} SSRKIT_COV_TEST_LIMIT={test_limit:g} "
            f"SSRKIT_COV_FILE_LIMIT={file_limit:g} "
            f"PYTEST_PLUGINS=ssrkit_cov_pytest${{PYTEST_PLUGINS:+,$PYTEST_PLUGINS}} "
            f"PYTHONPATH={q(helper_dir)}${{PYTHONPATH:+:$PYTHONPATH}}; ")


def run_with_coverage(sandbox: Sandbox, command: str, *, python: str, timeout: float,
                      name: str = "run", test_limit: float = 0.0, file_limit: float = 0.0) -> tuple[Any, TestMap]:
    """Run `command` under per-test coverage; return (the command's ExecResult, the map)."""
    helper_dir = install_helpers(sandbox)
    out_dir = sandbox.scratch_path(f"ssrkit_cov_{name}")
    sandbox.run(f"mkdir -p {shlex.quote(out_dir)}", timeout=timeouts.ONE_PATH)
    prefix = coverage_env_prefix(sandbox, helper_dir, out_dir, test_limit, file_limit)
    started = time.monotonic()
    res = sandbox.run(f"{prefix}{command}", timeout=timeout)
    seconds = time.monotonic() - started
    try:
        sandbox.read_file(f"{out_dir}/no-coverage")
        raise SsrkitError("per-test coverage needs the `coverage` package, and neither the Python that runs "
                          f"the repository's tests ({python}) nor ssrkit's copy of it imports there; install "
                          "coverage into that environment (pip install coverage)")
    except FileNotFoundError:
        pass
    out_file = f"{out_dir}/map.json"
    dump = sandbox.run(f"SSRKIT_COV_VENDOR={shlex.quote(helper_dir + '/vendor')} "
                       f"{python} {shlex.quote(helper_dir + '/dump.py')} {shlex.quote(sandbox.root)} "
                       f"{shlex.quote(out_dir)} {shlex.quote(out_file)}", timeout=max(60.0, timeout / 4))
    if not dump.ok:
        if dump.exit_code == 127:  # the shell found no such command
            raise SsrkitError(f"the Python that runs the repository's tests ({python}) is not found in the sandbox, "
                              "which sees the environment ssrkit runs in: activate the repository's virtualenv "
                              "first, or name its interpreter as [inject] python in ssrkit.toml "
                              f"({dump.output.strip()[-200:]})")
        raise SsrkitError(f"could not read the per-test coverage data: {dump.output.strip()[-400:]}")
    data = json.loads(sandbox.read_file(out_file).decode("utf-8"))
    data["seconds"] = seconds
    return res, TestMap.from_json(data)


def repo_fingerprint(sandbox: Sandbox) -> str:
    """A hash of the sandbox's repository state: HEAD, uncommitted changes, untracked files."""
    cmd = ("{ git rev-parse HEAD 2>/dev/null; git diff HEAD --binary 2>/dev/null; "
           "git ls-files -z -o --exclude-standard 2>/dev/null | xargs -0 -r sha256sum 2>/dev/null; } | sha256sum")
    res = sandbox.run(cmd, timeout=timeouts.WHOLE_TREE)
    if not res.ok:
        raise SsrkitError(f"could not fingerprint the repository: {res.output.strip()[:200]}")
    return res.output.split()[0][:32]


def build_testmap(sandbox: Sandbox, command: str, *, python: str, timeout: float, fingerprint: str,
                  environment: str, cache: bool = True, test_limit: float = 0.0,
                  file_limit: float = 0.0) -> TestMap:
    """The per-test coverage map of the whole suite, from the cache when this state was mapped before in the
    same environment (`environment`: `sandbox.environment_key` of the sandbox's options).

    `test_limit`: seconds one test may run under coverage before it is cut (0: no limit); `file_limit`: a test
    file whose passing tests took longer than that in all is not measured further (it is never selected: one
    run of it would outlast the budget of a run)."""
    key = hashlib.sha256(f"{fingerprint}\0{environment}\0{command}\0{python}\0{helpers_version()}\0{__version__}"
                         f"\0{test_limit:g}\0{file_limit:g}".encode()).hexdigest()[:32]
    path = testmaps_dir() / f"{key}.json"
    if cache and path.is_file():
        try:
            return TestMap.from_json(read_json(path))
        except (OSError, ValueError, KeyError):
            pass
    res, tm = run_with_coverage(sandbox, command, python=python, timeout=timeout, name="suite",
                                test_limit=test_limit, file_limit=file_limit)
    if res.timed_out:
        if not tm.passing():
            raise SsrkitError(f"the test suite did not finish within {timeout:g}s under coverage, and no test "
                              f"had passed by then (raise [inject] coverage_timeout or narrow the tests with "
                              f"[inject] args)")
        tm.complete = False  # a map of the tests that ran; not cached, the next run tries the whole suite again
        return tm
    if not tm.outcomes:
        tail = "\n".join(res.output.strip().splitlines()[-15:])
        broken = "".join(f"\n  {f}: {why}" for f, why in sorted(tm.broken.items())[:10])
        stage = (f"every test file errored at collection:{broken}\n" if broken else "")
        raise SsrkitError(f"no test ran under `{command}` (exit code {res.exit_code}); {stage}set [inject] "
                          f"runner / test_command / args in ssrkit.toml. Output:\n{tail}")
    if cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, tm.to_json())
        except OSError:
            pass
    return tm
