"""The agent loop shared by the injector and the solver (SPEC §5).

Linear and small on purpose: a system and a task message, then repeatedly ask the model for one tool call,
run it in the sandbox, and append its output (plus a one-line budget notice) as a user message. The
trajectory is the state — it is saved after every step, so a killed run keeps what it did.

The tool-call protocol (what a reply looks like, how it is parsed, how edits apply) is `tools.py`.
"""

from __future__ import annotations

import logging
import posixpath
import shlex
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, ClassVar

from ..errors import SsrkitError
from ..store.config import Config, load_settings, setting
from ..patch import unsafe_path_reason
from ..sandbox import timeouts
from ..sandbox.base import FileTooLargeError, Sandbox
from .client import Completion, ContextLengthError, ModelClient, ModelError
from .tools import FORMAT_HELP, FormatError, ToolCall, ToolError, apply_blocks, parse_tool_call, truncate
from .trajectory import Trajectory

log = logging.getLogger("ssrkit.agents")

#: the largest file the edit and create tools read (a source file is far smaller; a model that points them at a
#: sparse file of a GB gets a refusal, not a GB read into memory)
MAX_EDIT_BYTES = 4 * 1024 * 1024


class _TooLarge(ToolError):
    """A file over MAX_EDIT_BYTES: refused unread."""


@dataclass
class AgentConfig:
    """Limits of one agent run; the `[agent]` section of ssrkit.toml. 0 means "no limit" where noted."""

    SECTION: ClassVar[str] = "agent"

    max_turns: int = setting(50, help="assistant turns")
    command_timeout: float = setting(120.0, help="seconds per bash call; the whole process group is killed "
                                                 "after it")
    context_tokens: int | None = setting(65536, help="stop with context_limit when the conversation reaches "
                                                     "it (0: none)")
    wall_clock_s: float | None = setting(3600.0, help="seconds for the whole run (0: none)")
    max_format_errors: int = setting(3, help="consecutive malformed replies")
    output_chars: int = setting(10_000, help="tool output kept per call (head and tail)")

    @classmethod
    def from_config(cls, cfg: Any, **flags: Any) -> "AgentConfig":
        """`[agent]` of the resolved configuration (`ssrkit.store.config.Config`), then `flags` (None = not
        given); the sampling keys of `[agent]` are the client's (`agents.client.AgentSampling`)."""
        cfg = load_settings(cls, cfg, **flags)
        for f in fields(cls):
            value = getattr(cfg, f.name)
            if value is not None and value < 0:
                raise SsrkitError(f"[agent] {f.name} must be a non-negative number, got {value!r}")
        cfg.context_tokens = int(cfg.context_tokens) if cfg.context_tokens else None
        cfg.wall_clock_s = float(cfg.wall_clock_s) if cfg.wall_clock_s else None
        for key in ("max_turns", "max_format_errors", "output_chars"):
            if getattr(cfg, key) < 1:
                raise SsrkitError(f"[agent] {key} must be at least 1")
        if cfg.command_timeout <= 0:
            raise SsrkitError("[agent] command_timeout must be positive")
        return cfg

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "AgentConfig":
        """An `[agent]` table alone."""
        return cls.from_config(Config({"agent": dict(data or {})}))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- the loop ---------------------------------------------------------------------------------------

class _Done(Exception):
    def __init__(self, status: str, error: str | None = None):
        super().__init__(status)
        self.status, self.error = status, error


class Agent:
    """Runs one conversation between a model and a sandbox until submit or a limit.

    on_submit: called when the model submits; returns None to accept, or a message that goes back to the
        model (the run continues) — e.g. the injector's "bug_inject.diff is missing".
    writable_dirs: absolute directories outside the repository that edit/create may write to (the
        injector's submission directory). Every other path must be relative and stay inside the repository.
    client: None when someone else generates the replies and hands them to `act` (`ssrkit.env`).
    """

    def __init__(self, client: ModelClient | None, sandbox: Sandbox, config: AgentConfig | None = None, *,
                 on_submit: Callable[[], str | None] | None = None, writable_dirs: tuple[str, ...] = ()):
        self.client = client
        self.sandbox = sandbox
        self.config = config or AgentConfig()
        self.on_submit = on_submit
        self.writable_dirs = tuple(posixpath.normpath(d) for d in writable_dirs)

    def run(self, trajectory: Trajectory, system: str, task: str) -> Trajectory:
        """Run to the end; the trajectory says how it ended. Re-raises only ModelError and Ctrl-C.

        The model side of the loop only: `start`, then `act` on each of the client's replies. An environment
        (`ssrkit.env`) drives the same `start`/`act` with replies a trainer generated."""
        if self.start(trajectory, system, task):
            return trajectory
        try:
            while not self.act(self.complete()):
                pass
        except _Done as done:
            self._end(done.status, done.error)
        except ModelError as e:  # the endpoint is unusable: every other run would fail too
            self._end("error", str(e))
            raise
        except KeyboardInterrupt:
            self._end("error", "interrupted")
            raise
        except Exception as e:  # noqa: BLE001 - a client bug: recorded; the caller decides
            log.warning("agent run failed: %s: %s", type(e).__name__, e)
            self._end("error", f"{type(e).__name__}: {e}")
        return trajectory

    def start(self, trajectory: Trajectory, system: str, task: str) -> bool:
        """Begin a conversation (system and task message); True when a limit already ends it."""
        self.traj = trajectory
        self.status: str | None = None
        self._format_errors = 0
        self._t0 = time.monotonic()
        trajectory.add_message("system", system)
        trajectory.add_message("user", task)
        return self._guarded(self._check_budget)

    def complete(self) -> Completion:
        """The model's next reply to the conversation so far (raises _Done at the context limit)."""
        if self.client is None:
            raise SsrkitError("this agent has no model client: hand its replies to act()")
        try:
            completion = self.client.complete(self.traj.messages)
        except ContextLengthError as e:
            raise _Done("context_limit", str(e)) from None
        self._t0 += completion.server_wait_s  # waiting for a restarting server is not the agent's time
        return completion

    def act(self, completion: Completion) -> bool:
        """Take one reply: record it, run its tool call (or say what is wrong with it), append the observation,
        then check the limits. True when the run is over; `status` says how, the trajectory records it."""
        if self.status is not None:
            raise SsrkitError(f"this agent run is over ({self.status}); start a new one")
        return self._guarded(lambda: (self._act(completion), self._check_budget()))

    def step(self) -> None:
        """One model call and, when the reply holds a valid call, its execution (raises _Done at the end)."""
        if self.act(self.complete()):
            raise _Done(self.status or "error", self.traj.error)

    def _guarded(self, fn: Callable[[], Any]) -> bool:
        try:
            fn()
        except _Done as done:
            self._end(done.status, done.error)
        except (ModelError, KeyboardInterrupt):
            raise
        except Exception as e:  # noqa: BLE001 - a broken sandbox or a bug: recorded; the caller decides
            log.warning("agent run failed: %s: %s", type(e).__name__, e)
            self._end("error", f"{type(e).__name__}: {e}")
        return self.status is not None

    def _end(self, status: str, error: str | None = None) -> None:
        if self.status is None:
            self.status = status
            self.traj.finish(status, error)

    def _check_budget(self) -> None:
        cfg = self.config
        if len(self.traj.turns) >= cfg.max_turns:
            raise _Done("max_turns")
        if self._time_left() <= 0:
            raise _Done("timeout")
        if cfg.context_tokens and self._tokens_used() >= cfg.context_tokens:
            raise _Done("context_limit")

    def _act(self, completion: Completion) -> None:
        cfg = self.config
        self.traj.add_turn(completion)
        try:
            call = parse_tool_call(completion.text, completion.finish_reason)
        except FormatError as e:
            self._format_errors += 1
            self._observe(f"{e}\n\n{FORMAT_HELP}")
            if self._format_errors >= cfg.max_format_errors:
                raise _Done("format_errors") from None
            return
        self._format_errors = 0
        if call.name == "submit":
            problem = self.on_submit() if self.on_submit else None
            if problem is None:
                self.traj.set_submission({"turn": len(self.traj.turns)})
                raise _Done("submitted")
            self._observe(problem)
            return
        try:
            output = self.execute(call)
        except ToolError as e:
            output = f"Error: {e}"
        self._observe(output)

    # -- tools -----------------------------------------------------------------------------------
    def execute(self, call: ToolCall) -> str:
        if call.name == "bash":
            return self._bash(call.body)
        path = self._path(call.path or "")
        if call.name == "edit":
            old = self._read(path)
            if old is None:
                raise ToolError(f"{path} does not exist; use create to make a new file.")
            self._write(path, apply_blocks(old, call.blocks, path))
            return f"Edited {path} ({len(call.blocks)} block{'s' if len(call.blocks) > 1 else ''} replaced)."
        content = call.body + ("\n" if call.body and not call.body.endswith("\n") else "")
        try:
            existed = self._read(path) is not None
        except _TooLarge:  # create replaces it, unread
            existed = True
        parent = posixpath.dirname(path)
        if parent and not existed:
            self.sandbox.run(f"mkdir -p -- {shlex.quote(parent)}", timeout=timeouts.ONE_PATH)
        self._write(path, content)
        lines = content.count("\n")
        return f"{'Overwrote' if existed else 'Created'} {path} ({lines} line{'s' if lines != 1 else ''})."

    def _bash(self, command: str) -> str:
        timeout = max(1.0, min(self.config.command_timeout, self._time_left()))
        res = self.sandbox.run(command, timeout=timeout, stdin="")
        text = res.output[:-1] if res.output.endswith("\n") else res.output
        output = truncate(text, self.config.output_chars) if text else "(no output)"
        if res.timed_out:
            head = (f"The command timed out after {timeout:g} s and was killed, with every process it "
                    f"started. Avoid commands that wait for input or run servers; narrow it down or make it "
                    f"faster. Output before it was killed:")
        else:
            head = f"exit code {res.exit_code}"
        return f"{head}\n<output>\n{output}\n</output>"

    def _path(self, raw: str) -> str:
        """A repository-relative path, or an absolute one inside a writable directory."""
        raw = raw.strip()
        if raw.startswith("/"):
            norm = posixpath.normpath(raw)
            if any(norm == d or norm.startswith(d.rstrip("/") + "/") for d in self.writable_dirs):
                return norm
            root = getattr(self.sandbox, "root", "").rstrip("/")
            hint = (f" (inside the repository that is {norm[len(root) + 1:]!r})"
                    if root and norm.startswith(root + "/") else "")
            raise ToolError(f"{raw}: absolute paths are not allowed; give the path relative to the "
                            f"repository root{hint}.")
        reason = unsafe_path_reason(raw)
        if reason:
            raise ToolError(f"{raw!r}: {reason}; give a path inside the repository, relative to its root.")
        return posixpath.normpath(raw)

    def _read(self, path: str) -> str | None:
        try:
            data = self.sandbox.read_small(path, MAX_EDIT_BYTES)  # sized before it is read: never a GB in memory
        except FileNotFoundError:
            return None
        except FileTooLargeError as e:
            raise _TooLarge(f"{path} is {e.strerror}: the edit tool works on text files up to "
                            f"{MAX_EDIT_BYTES // 1048576} MiB; change it with bash instead.") from None
        except OSError as e:  # a directory, no permission: the model can act on that
            raise ToolError(f"cannot read {path}: {e.strerror or e}") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path} is not UTF-8 text; change it with bash instead.") from None

    def _write(self, path: str, content: str) -> None:
        try:
            self.sandbox.write_file(path, content)
        except OSError as e:
            raise ToolError(f"cannot write {path}: {e.strerror or e}") from None

    # -- budget ----------------------------------------------------------------------------------
    def _observe(self, text: str) -> None:
        self.traj.add_message("user", f"{text}\n{self._budget_notice()}")

    def _time_left(self) -> float:
        if not self.config.wall_clock_s:
            return float("inf")
        return self.config.wall_clock_s - (time.monotonic() - self._t0)

    def _tokens_used(self) -> int:
        """Context size of the next request: the server's count for the last call, plus what came after."""
        msgs = self.traj.messages
        last = self.traj.turns[-1] if self.traj.turns else None
        if last and last["usage"].get("total_tokens"):
            used = int(last["usage"]["total_tokens"])
            after = msgs[last["message_index"] + 1:]
        else:
            used, after = 0, msgs  # no usage reported: estimate ~4 characters per token
        return used + sum(len(m["content"]) for m in after) // 4

    def _budget_notice(self) -> str:
        cfg = self.config
        done = len(self.traj.turns)
        left = cfg.max_turns - done
        parts = [f"turn {done}/{cfg.max_turns}, {left} left"]
        if cfg.context_tokens:
            parts.append(f"context {self._tokens_used():,}/{cfg.context_tokens:,} tokens")
        if cfg.wall_clock_s:
            parts.append(f"{max(0.0, self._time_left()):.0f} s left")
        urgent = " Submit now if you are done." if left <= 1 else ""
        return f"[budget: {'; '.join(parts)}]{urgent}"
