"""Helpers for the training tests: trajectories and artifact directories as the other stages write them.

A module with a unique name (not conftest.py), so that `from train_helpers import ...` cannot pick up another
directory's conftest.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def encode(tokenizer: Any, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def conversation(tag: str, turns: int = 2, letters: str | None = None) -> list[dict[str, str]]:
    """A short agent conversation specific to `tag`. With `letters`, the assistant turns are written only with
    those letters, so that trajectories given disjoint letters share no trained token but <|im_end|>."""
    msgs = [
        {"role": "system", "content": "You are a software engineer."},
        {"role": "user", "content": f"Fix the bug in module {tag}."},
    ]
    for t in range(turns):
        said = f"<tool: bash>cat {tag}_{t}.py</tool>"
        if letters:
            said = " ".join(letters[(t + i) % len(letters)] * (2 + i) for i in range(4))
        msgs.append({"role": "assistant", "content": said})
        msgs.append({"role": "user", "content": f"def {tag}{t}(x):\n    return x + {t}\n"})
    if turns:
        msgs[-1] = {"role": "assistant", "content": letters * 3 if letters else "<tool: submit></tool>"}
    return msgs


def make_trajectory(
    tokenizer: Any,
    messages: list[dict[str, str]],
    role: str = "solver",
    exit_status: str = "submitted",
    stored: bool = True,
    logprobs_model: Any = None,
    break_prefix_at: int | None = None,
) -> dict[str, Any]:
    """A `ssrkit.trajectory/1` dict. With `stored`, each turn gets prompt/completion token ids as a sampler
    would (prompt rendered with the chat template, completion = content + <|im_end|>), and log-probs from
    `logprobs_model` when given. `break_prefix_at`: that turn's prompt is altered so the prefix property breaks."""
    turns = []
    for k, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        turn: dict[str, Any] = {
            "message_index": k,
            "prompt_token_ids": None,
            "completion_token_ids": None,
            "logprobs": None,
            "finish_reason": "stop",
            "usage": {},
            "seconds": 0.1,
        }
        if stored:
            prompt_text = tokenizer.apply_chat_template(messages[:k], tokenize=False, add_generation_prompt=True)
            if break_prefix_at is not None and len(turns) == break_prefix_at:
                prompt_text = prompt_text.replace("You are", "You were", 1)
            prompt = encode(tokenizer, prompt_text)
            completion = encode(tokenizer, message["content"] + "<|im_end|>")
            turn["prompt_token_ids"] = prompt
            turn["completion_token_ids"] = completion
            if logprobs_model is not None:
                turn["logprobs"] = sequence_logprobs(logprobs_model, prompt + completion)[len(prompt) - 1 :]
        turns.append(turn)
    return {
        "format": "ssrkit.trajectory/1",
        "role": role,
        "model": "tiny",
        "base_url": "http://localhost:0/v1",
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": 64},
        "exit_status": exit_status,
        "messages": messages,
        "turns": turns,
        "started": "2025-01-01T00:00:00",
        "ended": "2025-01-01T00:00:01",
        "seconds": 1.0,
        "error": None,
    }


def sequence_logprobs(model: Any, ids: list[int]) -> list[float]:
    """log p(ids[t] | ids[:t]) for t >= 1."""
    import torch

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
        lp = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
    return [float(v) for v in lp]


def write_artifact(
    root: Path,
    name: str,
    attempts: list[tuple[dict[str, Any], bool]],
    injector: tuple[dict[str, Any], float] | None = None,
    repo: str = "/repos/demo",
    commit: str = "c0ffee",
    solver_rewards: list[float] | None = None,
) -> Path:
    """An artifact dir: artifact.toml, optional injector trajectory + reward.json, attempts/NNN/{trajectory,eval}."""
    from ssrkit.artifact import Artifact

    from fixtures.repos import finish_attempt, write_reward_json

    art = root / name
    (art / "attempts").mkdir(parents=True)
    (art / "artifact.toml").write_text(
        f'id = "{name}"\nstrategy = "removal"\norder = 1\nbase_commit = "{commit}"\n\n[repo]\nkind = "local"\npath = "{repo}"\n'
    )
    (art / "bug_inject.diff").write_text(f"the bug of {name}\n")
    (art / "validation.json").write_text(json.dumps({"valid": True, "fail_to_pass": ["t"], "pass_to_pass": [],
                                                     "content_id": Artifact(art).content_id()}))
    for i, (trajectory, passed) in enumerate(attempts):
        d = art / "attempts" / f"{i:03d}"
        d.mkdir()
        (d / "trajectory.json").write_text(json.dumps(trajectory))
        finish_attempt(art, d.name, {"passed": passed, "reason": "ok" if passed else "failed", "tests": {},
                                     "exit_code": 0 if passed else 1})
    n_solved = sum(1 for _, p in attempts if p)
    s = n_solved / len(attempts) if attempts else 0.0
    reward: dict[str, Any] = {
        "valid": True,
        "n_attempts": len(attempts),
        "n_solved": n_solved,
        "solve_rate": s,
        "alpha": 0.8,
        "injector_reward": injector[1] if injector else -0.8,
        "solver_rewards": solver_rewards if solver_rewards is not None else [1.0 if p else -1.0 for _, p in attempts],
    }
    if injector is not None:
        (art / "trajectory.json").write_text(json.dumps(injector[0]))
    write_reward_json(art, {**reward, "attempts": [f"{i:03d}" for i in range(len(attempts))]})
    return art


def finite(values: list[float]) -> bool:
    return all(math.isfinite(v) for v in values)


def row_logprob_sums(model_dir, examples):
    import torch
    from transformers import AutoModelForCausalLM

    from ssrkit.train.loss import token_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    sums = []
    with torch.no_grad():
        for e in examples:
            ids = torch.tensor([e.input_ids])
            lp = token_logprobs(model(input_ids=ids).logits, ids)[0]
            mask = torch.tensor(e.loss_mask[1:], dtype=torch.bool)
            sums.append(lp[mask].sum().item())
    return sums
