"""A minimal Sandbox for the inject tests: a private copy of a repository in a temporary directory.

Snapshots are directory copies; commands run with bash in their own process group, killed on timeout.
It implements only the interface (sandbox/base.py) and none of the isolation of the real backends.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Mapping

from ssrkit.sandbox.base import PRISTINE, ExecResult, Sandbox, sanitized_env


class DirSandbox(Sandbox):
    backend = "dir"

    def __init__(self, repo: str | Path):
        self._tmp = Path(tempfile.mkdtemp(prefix="ssrkit-dirsb-"))
        self.root = str(self._tmp / "repo")
        self.scratch = str(self._tmp / "scratch")
        shutil.copytree(repo, self.root, symlinks=True)
        os.makedirs(self.scratch)
        self._snaps = self._tmp / "snaps"
        self._snaps.mkdir()
        self.snapshot(PRISTINE)

    def _abs(self, path: str) -> Path:
        return Path(path) if os.path.isabs(path) else Path(self.root) / path

    def run(self, command: str, *, timeout: float, env: Mapping[str, str] | None = None,
            stdin: bytes | str | None = None, cwd: str | None = None) -> ExecResult:
        if isinstance(stdin, str):
            stdin = stdin.encode()
        started = time.monotonic()
        # the fixture repositories need no pytest plugins: skip entry-point autoloading (much faster startup)
        extra = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})}
        proc = subprocess.Popen(["bash", "-c", command], cwd=cwd or self.root, env=sanitized_env(extra=extra),
                                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = proc.communicate(stdin, timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            timed_out = True
        return ExecResult(proc.returncode if not timed_out else -9, out.decode("utf-8", "replace"),
                          time.monotonic() - started, timed_out)

    def write_file(self, path: str, data: bytes | str, mode: int | None = None) -> None:
        p = self._abs(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            p.chmod(mode)

    def read_file(self, path: str) -> bytes:
        return self._abs(path).read_bytes()

    def snapshot(self, name: str) -> None:
        dest = self._snaps / name
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(self.root, dest, symlinks=True)

    def reset(self, name: str = PRISTINE) -> None:
        shutil.rmtree(self.root)
        shutil.copytree(self._snaps / name, self.root, symlinks=True)

    def close(self) -> None:
        shutil.rmtree(self._tmp, ignore_errors=True)
