"""The trajectory: the whole state of one agent run, saved to disk after every step.

Format `ssrkit.trajectory/1` (stable; defined, with its one reader, in `ssrkit.store.trajectory`):

    {"format", "role", "model", "base_url", "sampling", "logprobs", "exit_status", "messages", "turns",
     "started", "ended", "seconds", "error", "limits", "submission", "info"}

`logprobs` says what the turns' log-probs mean (`ModelClient.logprob_semantics`: mode "processed" | "raw" |
"unknown", temperature, top_p, dtype when known, how it was found); null when none were asked for. The trainer
uses them as the sampler's only when they are comparable with its own log_softmax(logits / T).

`messages` is the linear chat history in OpenAI format (tool results are plain `user` messages, so any chat
template can render it). `turns[i]` describes the i-th assistant message: `message_index` points into
`messages`, and the token ids / log-probs are the server's own when it returned them (else null). While a run
is in progress `exit_status` is "running": a killed run leaves a valid file holding every finished step.
With several servers (`--base-url` repeated) `turns[i].server` names the one that answered that turn.
`turns[i].policy` is the policy version that sampled the turn (`{"step", "id"}`, `store.policy`), null when the
server did not say; `turns[i].server_wait_s` the seconds the turn waited for a server that was down (when any).
No API key is ever part of it: the model client only hands over model name, public URL and sampling.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..store import trajectory as fmt
from ..store.artifact import now_iso
from ..store.fsutil import atomic_write_json
from ..store.trajectory import EXIT_STATUSES, FORMAT, ROLES, RUNNING
from .client import Completion


class Trajectory:
    """A trajectory in memory, mirrored to `path` (when given) on every change."""

    def __init__(self, role: str, *, model: dict[str, Any], limits: dict[str, Any],
                 path: str | Path | None = None, info: dict[str, Any] | None = None):
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.path = Path(path) if path is not None else None
        self._t0 = time.monotonic()
        self.data: dict[str, Any] = {
            "format": FORMAT,
            "role": role,
            "model": model.get("model"),
            "base_url": model.get("base_url"),
            "sampling": dict(model.get("sampling") or {}),
            "logprobs": model.get("logprobs"),
            "exit_status": RUNNING,
            "messages": [],
            "turns": [],
            "started": now_iso(),
            "ended": None,
            "seconds": 0.0,
            "error": None,
            "limits": dict(limits),
            "submission": None,
            "info": dict(info or {}),
        }

    # -- views -----------------------------------------------------------------------------------
    @property
    def messages(self) -> list[dict[str, str]]:
        return self.data["messages"]

    @property
    def turns(self) -> list[dict[str, Any]]:
        return self.data["turns"]

    @property
    def exit_status(self) -> str:
        return self.data["exit_status"]

    @property
    def error(self) -> str | None:
        return self.data["error"]

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    # -- changes (each one saved) ----------------------------------------------------------------
    def add_message(self, role: str, content: str) -> int:
        self.messages.append({"role": role, "content": content})
        self.save()
        return len(self.messages) - 1

    def add_turn(self, completion: Completion) -> dict[str, Any]:
        """Append the assistant message of one model call and what the server said about it."""
        self.messages.append({"role": "assistant", "content": completion.text})
        turn = {
            "message_index": len(self.messages) - 1,
            "prompt_token_ids": completion.prompt_token_ids,
            "completion_token_ids": completion.completion_token_ids,
            "logprobs": completion.logprobs,
            "finish_reason": completion.finish_reason,
            "usage": completion.usage,
            "seconds": completion.seconds,
        }
        if completion.server is not None:
            turn["server"] = completion.server
        turn["policy"] = completion.policy
        if completion.server_wait_s:
            turn["server_wait_s"] = completion.server_wait_s
        self.turns.append(turn)
        self.save()
        return turn

    def finish(self, status: str, error: str | None = None) -> None:
        if status not in EXIT_STATUSES:
            raise ValueError(f"exit status must be one of {EXIT_STATUSES}, got {status!r}")
        self.data["exit_status"] = status
        self.data["error"] = error
        self.data["ended"] = now_iso()
        self.save()

    def set_submission(self, submission: dict[str, Any] | None) -> None:
        self.data["submission"] = submission
        self.save()

    def set_error(self, error: str | None) -> None:
        self.data["error"] = error
        self.save()

    def save(self) -> None:
        self.data["seconds"] = round(self.elapsed(), 3)
        if self.path is not None:
            atomic_write_json(self.path, self.data)

    # -- reading ---------------------------------------------------------------------------------
    @staticmethod
    def load(path: str | Path) -> dict[str, Any]:
        """Read a trajectory file as a dict, checking its format tag (`ssrkit.store.trajectory.read`)."""
        return fmt.read(path)
