"""Trajectories -> training rows: token ids, a loss mask (1 only on model-generated tokens), the sampler's
log-probs (NaN where unknown) and the trajectory's advantage.

Two paths, logged per trajectory:
- "stored": every turn has `prompt_token_ids` and `completion_token_ids` (vLLM returns them). A row starts with
  the first turn's prompt + completion; each later turn whose prompt *extends* the row (the row is a prefix of it)
  appends the new prompt tokens (tool output, masked) and its completion (trained). Where the prefix property
  breaks (a template that rewrites history, a truncated context) a new row starts from that turn's full prompt.
- "template": otherwise the messages are rendered with the tokenizer's chat template; each assistant message's
  span is the text the template adds for it after the generation prompt, up to and including the tokenizer's
  end-of-turn (eos) token. The same prefix rule applies, in text.
Rows are cut to `max_length` tokens (the head is kept); a row left with no trained token is dropped.

The sampler's log-probs are kept only when they mean what the trainer computes, log_softmax(logits / T) over the
whole vocabulary (`sampler_logprobs_reason`): processed log-probs, or raw ones at T = 1, and top_p = 1. Otherwise
they are dropped (NaN) with the reason, and the loop takes the old policy from the initial checkpoint instead.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from ssrkit.store.trajectory import TrajectoryError

log = logging.getLogger("ssrkit.train")
NAN = float("nan")


@dataclass
class Row:
    input_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    sampler_logprobs: list[float] = field(default_factory=list)

    def add(self, ids: Sequence[int], trained: bool, logprobs: Sequence[float] | None = None) -> None:
        self.input_ids.extend(int(t) for t in ids)
        self.loss_mask.extend([1 if trained else 0] * len(ids))
        if logprobs is not None and len(logprobs) == len(ids):
            self.sampler_logprobs.extend(NAN if v is None else float(v) for v in logprobs)
        else:
            self.sampler_logprobs.extend([NAN] * len(ids))

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass
class Example:
    """One training row. Tensors are built in the loop; lists keep this module torch-free."""

    input_ids: list[int]
    loss_mask: list[int]
    sampler_logprobs: list[float]
    advantage: float
    role: str = ""
    source: str = ""  # trajectory path
    row: int = 0  # index of the row within its trajectory
    path: str = ""  # "stored" | "template"
    temperature: float = 1.0  # sampling temperature (log-probs are compared at the same temperature)
    logprobs_dropped: str = ""  # why the stored sampler log-probs were not comparable (and so not used)

    @property
    def trained_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass
class ExampleStats:
    trajectories: int = 0
    rows: int = 0
    paths: Counter = field(default_factory=Counter)  # "stored"/"template" -> trajectories
    truncated_rows: int = 0
    dropped_rows: int = 0  # no trained token left
    trained_tokens: int = 0
    total_tokens: int = 0
    with_logprobs: int = 0  # trained tokens that have a sampler log-prob
    trained_tokens_by_path: Counter = field(default_factory=Counter)  # "stored"/"template" -> trained tokens
    logprobs_dropped: Counter = field(default_factory=Counter)  # reason -> trained tokens whose log-probs were dropped

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        for key in ("paths", "trained_tokens_by_path", "logprobs_dropped"):
            d[key] = dict(d[key])
        return d


def has_stored_tokens(trajectory: dict[str, Any]) -> bool:
    turns = trajectory.get("turns") or []
    return bool(turns) and all(
        isinstance(t, dict) and t.get("prompt_token_ids") and t.get("completion_token_ids") is not None for t in turns
    )


def rows_from_stored(turns: Sequence[dict[str, Any]]) -> list[Row]:
    """Rows from stored token ids (see the module docstring)."""
    rows: list[Row] = []
    row: Row | None = None
    for turn in turns:
        prompt = turn["prompt_token_ids"]
        completion = turn["completion_token_ids"]
        logprobs = turn.get("logprobs")
        if row is not None and len(prompt) >= len(row) and prompt[: len(row)] == row.input_ids:
            row.add(prompt[len(row) :], trained=False)
        else:
            row = Row()
            rows.append(row)
            row.add(prompt, trained=False)
        row.add(completion, trained=True, logprobs=logprobs)
    return rows


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)


def _render(tokenizer: Any, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def rows_from_template(
    messages: Sequence[dict[str, Any]], tokenizer: Any, assistant_indices: Sequence[int] | None = None
) -> list[Row]:
    """Rows from the chat template: assistant messages (those in `assistant_indices`, default all) are trained."""
    msgs = [{"role": m.get("role", "user"), "content": _content(m)} for m in messages]
    if assistant_indices is None:
        assistant_indices = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    rows: list[Row] = []
    row: Row | None = None
    text = ""  # the text `row` covers
    for k in sorted(set(assistant_indices)):
        if k >= len(msgs) or msgs[k]["role"] != "assistant":
            continue
        prompt = _render(tokenizer, msgs[:k], add_generation_prompt=True)
        full = _render(tokenizer, msgs[: k + 1], add_generation_prompt=False)
        completion = full[len(prompt) :] if full.startswith(prompt) else msgs[k]["content"]
        if row is not None and prompt.startswith(text):
            row.add(encode(prompt[len(text) :]), trained=False)
        else:
            row = Row()
            rows.append(row)
            row.add(encode(prompt), trained=False)
        # the model stops at its end-of-turn token; what the template appends after it (e.g. "\n") is not sampled
        eos = getattr(tokenizer, "eos_token", None)
        cut = completion.rfind(eos) + len(eos) if eos and eos in completion else len(completion)
        row.add(encode(completion[:cut]), trained=True)
        row.add(encode(completion[cut:]), trained=False)
        text = prompt + completion
    return rows


def trajectory_rows(trajectory: dict[str, Any], tokenizer: Any) -> tuple[list[Row], str]:
    """All rows of one trajectory and the path taken ("stored" or "template")."""
    if has_stored_tokens(trajectory):
        return rows_from_stored(trajectory["turns"]), "stored"
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        raise ValueError("trajectory has no token ids and the tokenizer has no chat template")
    turns = trajectory.get("turns") or []
    indices = [t["message_index"] for t in turns if isinstance(t, dict) and isinstance(t.get("message_index"), int)]
    return rows_from_template(trajectory.get("messages") or [], tokenizer, indices or None), "template"


def truncate(row: Row, max_length: int) -> bool:
    """Cut `row` to `max_length` tokens in place; True when it was longer."""
    if len(row) <= max_length:
        return False
    del row.input_ids[max_length:], row.loss_mask[max_length:], row.sampler_logprobs[max_length:]
    return True


def sampling_temperature(trajectory: dict[str, Any]) -> float:
    sampling = trajectory.get("sampling") or {}
    temperature = sampling.get("temperature") if isinstance(sampling, dict) else None
    if not isinstance(temperature, (int, float)) or temperature <= 0:
        return 1.0  # unknown or greedy: log-probs at temperature 1
    return float(temperature)


def sampler_logprobs_reason(trajectory: dict[str, Any]) -> str | None:
    """Why the trajectory's stored log-probs cannot stand for the trainer's log_softmax(logits / T), or None.

    `trajectory["logprobs"]` (written by the model client) says what they mean; a trajectory without it is
    judged by its sampling settings alone, which settles every case but raw-vs-processed at T != 1.
    """
    sampling = trajectory.get("sampling") if isinstance(trajectory.get("sampling"), dict) else {}
    meaning = trajectory.get("logprobs") if isinstance(trajectory.get("logprobs"), dict) else {}
    top_p = meaning.get("top_p", sampling.get("top_p", 1.0))
    if isinstance(top_p, (int, float)) and top_p < 1.0:
        return f"sampled with top_p {top_p:g} < 1 (the sampler's distribution is cut to the nucleus)"
    temperature = sampling_temperature(trajectory)
    if temperature == 1.0:
        return None  # raw and processed log-probs agree
    mode = meaning.get("mode", "unknown")
    if mode == "processed":
        return None
    if mode == "raw":
        return f"raw log-probs (before temperature) at temperature {temperature:g}"
    return f"log-prob mode unknown at temperature {temperature:g} (recorded without ssrkit's probe)"


def build_examples(
    items: Sequence[tuple[Any, float]], tokenizer: Any, max_length: int, stats: ExampleStats | None = None
) -> tuple[list[Example], ExampleStats]:
    """`items` = (rollout, advantage) pairs, rollout having `.load()` (its trajectory), `.name`, `.role`. Returns
    the rows."""
    stats = stats or ExampleStats()
    examples: list[Example] = []
    for rollout, advantage in items:
        path = rollout.name
        try:
            trajectory = rollout.load()  # a file changed since the scan counted it is skipped, not fatal
            rows, how = trajectory_rows(trajectory, tokenizer)
        except (TrajectoryError, ValueError) as exc:
            log.warning("skipping %s: %s", path, exc)
            continue
        log.debug("%s: %s token ids, %d row(s)", path, how, len(rows))
        stats.trajectories += 1
        stats.paths[how] += 1
        temperature = sampling_temperature(trajectory)
        dropped = sampler_logprobs_reason(trajectory) if how == "stored" else None
        for index, row in enumerate(rows):
            if truncate(row, max_length):
                stats.truncated_rows += 1
            trained = row.trained_tokens
            if trained == 0:
                stats.dropped_rows += 1
                continue
            stats.rows += 1
            stats.trained_tokens += trained
            stats.trained_tokens_by_path[how] += trained
            if dropped:
                row.sampler_logprobs = [NAN] * len(row)
                stats.logprobs_dropped[dropped] += trained
            stats.total_tokens += len(row)
            stats.with_logprobs += sum(
                1 for m, lp in zip(row.loss_mask, row.sampler_logprobs) if m and not math.isnan(lp)
            )
            examples.append(
                Example(
                    row.input_ids,
                    row.loss_mask,
                    row.sampler_logprobs,
                    float(advantage),
                    rollout.role,
                    path,
                    index,
                    how,
                    temperature,
                    dropped or "",
                )
            )
    return examples, stats
