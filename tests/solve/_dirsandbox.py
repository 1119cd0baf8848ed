"""A plain-directory Sandbox for tests until the real backends land (no isolation)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

from ssrkit.sandbox.base import PRISTINE, ExecResult, Sandbox, sanitized_env


class DirSandbox(Sandbox):
    backend = "dir"

    def __init__(self, repo: str):
        self.dir = tempfile.mkdtemp(prefix="dirsb-")
        self.root = os.path.join(self.dir, "ws")
        self.scratch = os.path.join(self.dir, "scratch")
        os.mkdir(self.scratch)
        shutil.copytree(repo, self.root, symlinks=True)
        self._snaps: dict[str, str] = {}
        self.snapshot(PRISTINE)

    def run(self, command, *, timeout, env=None, stdin=None, cwd=None):
        e = sanitized_env(extra=env)
        e["PYTHONPATH"] = ":".join([self.root, os.path.join(self.root, "src")])
        e["PATH"] = f"{os.path.dirname(sys.executable)}:{e['PATH']}"
        t0 = time.monotonic()
        if isinstance(stdin, str):
            stdin = stdin.encode()
        try:
            p = subprocess.run(["bash", "-c", command], cwd=cwd or self.root, env=e, input=stdin,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
            return ExecResult(p.returncode, p.stdout.decode("utf-8", "replace"), time.monotonic() - t0)
        except subprocess.TimeoutExpired as ex:
            return ExecResult(124, (ex.stdout or b"").decode("utf-8", "replace"), time.monotonic() - t0, True)

    def _host(self, path):
        return path if os.path.isabs(path) else os.path.join(self.root, path)

    def write_file(self, path, data, mode=None):
        h = self._host(path)
        os.makedirs(os.path.dirname(h), exist_ok=True)
        if os.path.islink(h):
            os.unlink(h)
        with open(h, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        if mode is not None:
            os.chmod(h, mode)

    def read_file(self, path):
        with open(self._host(path), "rb") as fh:
            return fh.read()

    def snapshot(self, name):
        d = os.path.join(self.dir, "snap-" + name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.root, d, symlinks=True)
        self._snaps[name] = d

    def reset(self, name=PRISTINE):
        shutil.rmtree(self.root)
        shutil.copytree(self._snaps[name], self.root, symlinks=True)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)
