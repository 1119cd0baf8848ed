"""The one interface all execution goes through (SPEC §3).

A sandbox holds a private copy of a repository. Commands run at the repository root with a timeout that
kills the whole process tree; the tree can be diffed, snapshotted under a name and reset cheaply. The
sandbox knows nothing about artifacts: callers apply patches and run scripts.
"""

from __future__ import annotations

import errno
import shlex
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..errors import PatchError
from ..patch import explain_apply_error, git_apply_args
from . import timeouts
from .applies import Applies, patch_error
from .capture import OutputCapture
from .git import fresh_history_command

PRISTINE = "pristine"

_interp_cache: dict[tuple, str] = {}
_interp_lock = threading.Lock()


@dataclass
class ExecResult:
    """What one command did. `output` is stdout and stderr interleaved, decoded with replacement."""

    exit_code: int
    output: str
    seconds: float
    timed_out: bool = False
    truncated: bool = False  # output was longer than the limit; head and tail were kept

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class FileTooLargeError(OSError):
    """`Sandbox.read_small` refused a file over its limit before reading it (an OSError: EFBIG)."""

    def __init__(self, path: str, size: int, limit: int):
        super().__init__(errno.EFBIG, f"{_mib(size)}, over the {_mib(limit)} limit", path)
        self.path, self.size, self.limit = path, size, limit


def _mib(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


@dataclass
class Limits:
    """Resource limits for every command in a sandbox."""

    memory_mb: int = 4096  # address space (local) / container memory (docker)
    pids: int = 512  # processes / threads
    cpus: float = 2.0  # docker CPU quota
    cpu_seconds: int | None = None  # RLIMIT_CPU per command (local)
    file_size_mb: int = 1024  # largest file a command may write
    output_bytes: int = 16 * 1024 * 1024  # output kept per command (head + tail beyond this)
    network: bool = False


@dataclass
class SandboxOptions:
    limits: Limits = field(default_factory=Limits)
    env: dict[str, str] = field(default_factory=dict)  # extra variables (after sanitizing)
    setup: str | None = None  # shell command run once after start, before the pristine snapshot
    setup_timeout: float = 900.0  # seconds allowed for `setup`
    #: host paths commands must not see (e.g. the artifact a solver works on); honoured where the backend
    #: isolates the filesystem (local with bubblewrap: an empty tmpfs / an empty file over each; docker
    #: never mounts host paths)
    hide: list[str] = field(default_factory=list)


class Sandbox(ABC):
    """A private, resettable copy of one repository."""

    backend: str = "?"
    #: repository root as commands see it (the cwd of `run`)
    root: str
    #: a private scratch directory outside the repository, as commands see it
    scratch: str
    #: what every command may use (`SandboxOptions.limits`); output is kept within `limits.output_bytes`
    limits: Limits

    # -- required of every backend ------------------------------------------------------------------
    @abstractmethod
    def run(
        self,
        command: str,
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
    ) -> ExecResult:
        """Run `command` with bash at the repository root (or `cwd`); never raises for the command's failure.

        stdout and stderr share one pipe (interleaved as written); output beyond `limits.output_bytes` keeps
        its head and tail. When `timeout` expires every process the command started is killed, `timed_out`
        is set and `exit_code` is 124. No process started by a command outlives it: background children
        still running when the command exits are killed too. A sandbox runs one command at a time.
        """

    @abstractmethod
    def write_file(self, path: str, data: bytes | str, mode: int | None = None) -> None:
        """Write a file; `path` is relative to the root, or absolute under `scratch`."""

    @abstractmethod
    def read_file(self, path: str) -> bytes:
        """Read a file (relative to the root, or absolute under `scratch`); FileNotFoundError if absent."""

    @abstractmethod
    def snapshot(self, name: str) -> None:
        """Remember the current tree under `name` (overwriting an earlier snapshot of that name)."""

    @abstractmethod
    def reset(self, name: str = PRISTINE) -> None:
        """Bring the tree back to snapshot `name` exactly (ignored and generated files included)."""

    @abstractmethod
    def close(self) -> None:
        """Release everything: processes, containers, temporary directories. Idempotent."""

    @property
    def isolation(self) -> dict[str, object]:
        """Which isolation is in force (recorded in validation.json's settings)."""
        return {"backend": self.backend}

    # -- shared helpers built on the primitives ----------------------------------------------------
    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def scratch_path(self, name: str) -> str:
        return f"{self.scratch.rstrip('/')}/{name}"

    def apply_patch(self, diff: str, *, label: str = "diff", reverse: bool = False,
                    timeout: float = timeouts.FEW_FILES) -> None:
        """Apply a unified diff at the root with `git apply`; PatchError names the failing file and hunk."""
        if not diff.strip():
            return
        # one fixed scratch file, overwritten each time: a sandbox runs one command at a time, and an extra
        # command to delete it would cost as much as the apply itself
        res = self.run(self.patch_command(diff, "ssrkit-patch.diff", reverse=reverse), timeout=timeout)
        if not res.ok:
            raise PatchError(explain_apply_error(res.output, label))

    def patch_command(self, diff: str, name: str, *, reverse: bool = False, check: bool = False) -> str:
        """Write `diff` to scratch file `name` and return the `git apply` command that applies it at the root
        (`check`: that only says whether it would apply)."""
        path = self.scratch_path(name)
        self.write_file(path, diff if diff.endswith("\n") else diff + "\n")
        return " ".join(shlex.quote(a) for a in git_apply_args(reverse=reverse, check=check)) + " " + shlex.quote(path)

    def applies(self, diffs: Sequence[tuple[str, str]], *, stem: str = "ssrkit-apply",
                checks: Sequence[tuple[str, str]] = ()) -> "Applies":
        """The applies of `diffs` ((label, diff) in order) as one shell prefix, to run alone
        (`apply_patches`) or in front of another command (`testrun.run_tests`); two chained in one command
        need different `stem`s (the scratch files of their diffs). `checks`: diffs that must apply on top of
        `diffs` but are not applied (`git apply --check`)."""
        return Applies(self, diffs, stem=stem, checks=checks)

    def apply_patches(self, diffs: Sequence[tuple[str, str]], *, timeout: float = timeouts.FEW_FILES) -> None:
        """Apply several diffs in order with one command; PatchError (its `label`: the diff's) names the
        first that fails."""
        ap = self.applies(diffs)
        if not ap.steps:
            return
        res = self.run(ap.command("true"), timeout=timeout)
        failed = ap.failure(res.output) or (None if res.ok else (ap.labels[-1], res.output))
        if failed is not None:
            raise patch_error(*failed)

    def interpreter(self, name: str = "python3", *, timeout: float = timeouts.FEW_FILES) -> str:
        """The absolute path of the interpreter `name` resolves to in this sandbox, version-manager shims
        (pyenv, asdf) followed, so that starting it does not pay the shim's own start-up (a pyenv shim costs a
        few hundred milliseconds per call). Resolved once in the sandbox's current state and cached under
        `interpreter_key` (per sandbox unless a backend says more); `name` itself when it cannot be resolved.
        """
        shared = self.interpreter_key
        cache = _interp_cache if shared is not None else self.__dict__.setdefault("_interpreters", {})
        key = (shared, name)
        with _interp_lock:
            hit = cache.get(key)
        if hit is not None:
            return hit
        q = shlex.quote(name)
        res = self.run(f"p=$({q} -c 'import sys; print(sys.executable)') && test -x \"$p\" && printf %s \"$p\"",
                       timeout=timeout)
        path = res.output.strip()
        found = path if res.ok and path.startswith("/") and "\n" not in path else name
        with _interp_lock:
            cache[key] = found
        return found

    @property
    def parses_in_run(self) -> bool:
        """May `testrun.run_tests` run the parser in the test command itself? Only where a command's processes
        share a pid namespace with nothing else of the machine, so that the command can kill every process
        the tests left (`kill -9 -1`) before the parser starts. False (the default): two commands."""
        return False

    def interrupt(self) -> None:
        """Kill the command running now (called from another thread; its `run` returns what it had). Only
        where `parses_ahead`: the default has nothing to kill."""

    @property
    def parses_ahead(self) -> bool:
        """May `testrun` start a parser here before its log exists (`templates/parse_ahead.py`), then write the
        log and the signal to go while that command runs, and `interrupt` it when its time is up? Only where
        `write_file` does not wait for a running command. False (the default): the parse is a command of
        its own, started once the log is known."""
        return False

    def read_small(self, path: str, limit: int) -> bytes:
        """`read_file`, refused with FileTooLargeError before anything is read when the file is over `limit`
        bytes: a file a model hands over, or points a tool at, may be a size bomb (a sparse file of a GB)."""
        res = self.run(f"stat -L -c %s -- {shlex.quote(path)}", timeout=timeouts.ONE_PATH)
        size = res.output.strip()
        if res.ok and size.isdigit() and int(size) > limit:
            raise FileTooLargeError(path, int(size), limit)
        data = self.read_file(path)  # the stat failed (no such file: read_file says so) or it is small enough
        if len(data) > limit:  # it grew since (no command runs between the two: only a backend without stat)
            raise FileTooLargeError(path, len(data), limit)
        return data

    def read_capped(self, path: str) -> tuple[bytes, bool]:
        """A file's head and tail within `limits.output_bytes`, as a command's output is kept; (data, cut?)."""
        cap = OutputCapture(self.limits.output_bytes)
        cap.feed(self.read_file(path))
        return cap.result()

    @property
    def interpreter_key(self) -> tuple | None:
        """What decides where `interpreter` resolves, when sandboxes of one kind share the answer in this
        process; None (the default): this sandbox alone."""
        return None

    def diff(self, *, timeout: float = timeouts.WHOLE_TREE) -> str:
        """The working tree's changes against HEAD as a `git diff`, new files included, binary-safe."""
        cmd = "git add -A -N . >/dev/null 2>&1; git -c core.quotepath=false diff --no-color --no-ext-diff --binary HEAD"
        res = self.run(cmd, timeout=timeout, env={"GIT_OPTIONAL_LOCKS": "0"})
        if not res.ok:
            raise PatchError(f"could not compute the sandbox diff: {res.output.strip()[:300]}")
        # intent-to-add entries must not linger in the index
        self.run("git reset -q >/dev/null 2>&1 || true", timeout=timeout)
        return res.output

    def fresh_history(self, *, message: str = "Initial commit", timeout: float = timeouts.WHOLE_TREE) -> None:
        """Replace the git history by one commit of the current tree (the solver must not see the past)."""
        res = self.run(fresh_history_command(message), timeout=timeout)
        if not res.ok:
            raise PatchError(f"could not create a fresh git history: {res.output.strip()[:300]}")
