"""Fixtures for the agent tests: a real subprocess sandbox, a tiny git repository, a scripted server.

`SubprocessSandbox` is a small but real `Sandbox`: a private copy of a repository in a temporary directory,
commands run with `bash -c` in their own process group (killed as a group on timeout) and a sanitized
environment. It exists so these tests need neither Docker nor the production backends.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from fixtures.calc import CALC, TEST_CALC  # noqa: E402
from fixtures.repos import git  # noqa: E402
from scripted_server import ScriptedServer  # noqa: E402

from ssrkit.sandbox.base import PRISTINE, ExecResult, Sandbox, sanitized_env  # noqa: E402


class SubprocessSandbox(Sandbox):
    """A repository copy under `workdir`; commands are real subprocesses."""

    backend = "test-subprocess"

    def __init__(self, repo: Path, workdir: Path):
        workdir.mkdir(parents=True, exist_ok=True)
        self._work = workdir
        self.root = str(workdir / "repo")
        self.scratch = str(workdir / "scratch")
        shutil.copytree(repo, self.root, symlinks=True)
        os.makedirs(self.scratch, exist_ok=True)
        self.snapshot(PRISTINE)

    def run(self, command: str, *, timeout: float, env: Mapping[str, str] | None = None,
            stdin: bytes | str | None = None, cwd: str | None = None) -> ExecResult:
        full_env = sanitized_env(extra=env)
        full_env["PATH"] = f"{os.path.dirname(sys.executable)}:{full_env['PATH']}"
        data = stdin.encode() if isinstance(stdin, str) else stdin
        t0 = time.monotonic()
        proc = subprocess.Popen(["bash", "-c", command], cwd=cwd or self.root, env=full_env,
                                stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            out, _ = proc.communicate(input=data, timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            self._kill_group(proc.pid)
            try:
                out, _ = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                out = b""
        self._kill_group(proc.pid)  # leftovers started in the background
        return ExecResult(exit_code=124 if timed_out else proc.returncode,
                          output=(out or b"").decode("utf-8", errors="replace"),
                          seconds=time.monotonic() - t0, timed_out=timed_out)

    @staticmethod
    def _kill_group(pid: int) -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _resolve(self, path: str) -> Path:
        if os.path.isabs(path):
            p = Path(os.path.normpath(path))
            if not str(p).startswith(self.scratch.rstrip("/") + "/"):
                raise PermissionError(f"{path} is outside the sandbox scratch directory")
            return p
        return Path(self.root) / path

    def write_file(self, path: str, data: bytes | str, mode: int | None = None) -> None:
        p = self._resolve(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            p.chmod(mode)

    def read_file(self, path: str) -> bytes:
        return self._resolve(path).read_bytes()

    def snapshot(self, name: str) -> None:
        dest = self._work / "snapshots" / name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.root, dest, symlinks=True)

    def reset(self, name: str = PRISTINE) -> None:
        shutil.rmtree(self.root)
        shutil.copytree(self._work / "snapshots" / name, self.root, symlinks=True)

    def close(self) -> None:
        shutil.rmtree(self._work, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository with a calculator module and seven passing pytest tests, in two commits."""
    repo = tmp_path_factory.mktemp("tiny") / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC.replace("    if x > hi:\n        return hi\n", ""))
    (repo / "tests" / "test_calc.py").write_text(TEST_CALC.replace(
        "def test_clamp_high():\n    assert clamp(50, 0, 10) == 10\n\n\n", ""))
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Calculator with add, sub, clamp and mean")
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TEST_CALC)
    git(repo, "commit", "-q", "-am", "Fix clamp: respect the upper bound")
    return repo


@pytest.fixture
def sandbox(tiny_repo: Path, tmp_path: Path):
    sb = SubprocessSandbox(tiny_repo, tmp_path / "sandbox")
    yield sb
    sb.close()


@pytest.fixture
def serve():
    """`serve(script, **kw)` starts a ScriptedServer that is stopped after the test."""
    servers: list[ScriptedServer] = []

    def start(script: Any, **kw: Any) -> ScriptedServer:
        server = ScriptedServer(script, **kw).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.stop()


def make_by_turn(steps: Callable[[str], list[str]]) -> Callable[[list[dict], dict], str | None]:
    """A rule serving `steps(submission_dir)[k]` at the k-th assistant turn (None when done).

    The submission directory is read from the task message, as a model would.
    """

    def rule(messages: list[dict], request: dict) -> str | None:
        k = sum(1 for m in messages if m["role"] == "assistant")
        m = re.search(r"into the directory `([^`]+)`", messages[1]["content"] if len(messages) > 1 else "")
        todo = steps(m.group(1) if m else "")
        return todo[k] if k < len(todo) else None

    return rule


PARSER = '''\
import json
import re
import sys

STATUS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}
results = {}
for line in sys.stdin:
    m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED) (\\S+)", line)
    if m:
        results[m.group(2)] = STATUS[m.group(1)]
print(json.dumps(results, indent=1))
'''


def tiny_injector_steps(sub: str) -> list[str]:
    """What a good injector does on the tiny repository (removal strategy), as real tool calls."""
    from scripted_server import bash, create, edit, submit

    check = f"bash {sub}/test_script.sh | python {sub}/test_parser.py"
    return [
        bash("git log --oneline && ls && python -m pytest -q 2>&1 | tail -3", "First, the lay of the land."),
        create(f"{sub}/test_script.sh", "#!/bin/bash\npython -m pytest -rA tests/test_calc.py\n"),
        create(f"{sub}/test_files.txt", "tests/test_calc.py\n"),
        create(f"{sub}/test_parser.py", PARSER),
        bash(check, "Check the script and the parser on the original code."),
        edit("calc.py", "    if x > hi:\n        return hi", "", "Remove the upper bound of clamp."),
        bash(f"git add -A -N . && git diff -- calc.py > {sub}/bug_inject.diff && {check}"),
        edit("tests/test_calc.py", "def test_clamp_high():\n    assert clamp(50, 0, 10) == 10\n\n", ""),
        bash(f"git diff -- tests/test_calc.py > {sub}/test_weaken.diff && {check}"),
        submit("All five files are written."),
    ]


# Helpers reach the tests as fixtures: `from conftest import ...` would pick whichever conftest module
# another test directory imported first.

@pytest.fixture
def by_turn():
    return make_by_turn


@pytest.fixture
def injector_steps():
    return tiny_injector_steps
