"""What every episode shares: the single-use lifecycle (reset → step* → done → close) and the step's result.

An episode owns one sandbox from `reset` until it is done or closed; `close` is idempotent and runs from any
state, so a trainer that abandons an episode (or a server whose client vanished) never leaks a sandbox. The
conversation is driven by the agent loop of `ssrkit solve --solver llm` / `ssrkit inject --agent llm`
(`ssrkit.agents.Agent.act`): the replies come from the caller instead of a model client.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from ..agents.client import Completion
from ..errors import SsrkitError


@dataclass
class StepResult:
    """What one step gives back. `messages`: the new user messages (the observation; none once done).
    `reward`: the final reward on the last step (None before, and for an injection still waiting for its
    group's solve attempts). `info`: on the last step, the exit status and the verdict (never a secret)."""

    messages: list[dict[str, str]]
    done: bool
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


def as_completion(message: str | Completion, *, finish_reason: str | None = None,
                  usage: dict[str, Any] | None = None) -> Completion:
    """A reply as the agent loop takes it. `finish_reason="length"` (cut off) is the loop's format error;
    `usage` (the generator's token counts) makes the context budget exact instead of a chars/4 estimate."""
    if isinstance(message, Completion):
        return message
    if not isinstance(message, str):
        raise SsrkitError(f"a step takes the model's reply as text, got {type(message).__name__}")
    return Completion(text=message, finish_reason=finish_reason, usage=dict(usage or {}))


class Episode(ABC):
    """The lifecycle; subclasses open their sandbox in `_open` and settle the reward in `_finish`."""

    role = "?"

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._sandbox: Any = None
        self._agent: Any = None
        self._state = "new"  # new → running → done | closed
        self.reward: float | None = None
        self.info: dict[str, Any] = {}

    # -- the public lifecycle ---------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self._state in ("done", "closed")

    @property
    def messages(self) -> list[dict[str, str]]:
        """The whole conversation so far (system, task, then replies and observations)."""
        return [dict(m) for m in self._agent.traj.messages] if self._agent is not None else []

    @property
    def trajectory(self) -> Any:
        """The `ssrkit.trajectory/1` record of the conversation (`ssrkit.agents.Trajectory`), once reset."""
        return self._agent.traj if self._agent is not None else None

    def reset(self) -> list[dict[str, str]]:
        """Open the sandbox and start the conversation; the first messages (system and task)."""
        with self._lock:
            if self._state != "new":
                raise SsrkitError(f"this {self.role} episode was already {'reset' if self._state == 'running' else self._state}"
                                  f"; an episode is single-use — make a new one")
            self._state = "running"
            try:
                over = self._open()
            except BaseException:
                self.close()
                raise
            if over:  # a limit already ended it (e.g. a task larger than the context budget)
                self._settle()
            return self.messages

    def step(self, message: str | Completion, *, finish_reason: str | None = None,
             usage: dict[str, Any] | None = None) -> StepResult:
        """Take the model's reply: run its tool call in the sandbox; the observation, or the end and reward."""
        completion = as_completion(message, finish_reason=finish_reason, usage=usage)
        with self._lock:
            if self._state == "new":
                raise SsrkitError(f"call reset() before step() on a {self.role} episode")
            if self._state != "running":
                raise SsrkitError(f"this {self.role} episode is {self._state}; make a new one")
            before = len(self._agent.traj.messages)
            over = self._agent.act(completion)
            new = [dict(m) for m in self._agent.traj.messages[before + 1:]]  # after the reply itself
            if not over:
                return StepResult(new, False)
            self._settle()
            return StepResult([], True, self.reward, dict(self.info))

    def close(self) -> None:
        """Close the sandbox (idempotent; safe in any state). An unfinished episode ends without a reward."""
        with self._lock:
            if self._state in ("new", "running"):
                self._state = "closed"
            self._close_sandbox()

    def __enter__(self) -> "Episode":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- for subclasses ---------------------------------------------------------------------------
    @abstractmethod
    def _open(self) -> bool:
        """Open the sandbox and start the conversation; True when a limit already ends it."""

    @abstractmethod
    def _finish(self) -> None:
        """Compute `reward` and `info` once the conversation is over (the sandbox is still open)."""

    def _settle(self) -> None:
        try:
            self._finish()
        finally:
            self._state = "done"
            self._close_sandbox()

    def _close_sandbox(self) -> None:
        sb, self._sandbox = self._sandbox, None
        if sb is not None:
            sb.close()
