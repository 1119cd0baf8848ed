"""TRL's GRPOTrainer on `ssrkit env serve` (extra `trl`; docs/env.md): a `rollout_func` and a reward function.

Why `rollout_func` and not TRL's `environment_factory`: the latter turns the tools into JSON function calls
that the chat template must render and parse; `rollout_func` keeps ssrkit's own prompt and text tool protocol,
exactly as `ssrkit solve --solver llm` uses them. Each rollout is one OpenEnv session: the policy (the model
being trained, `trainer.model`) writes each reply; the server runs it and answers. The completion TRL trains on
is every reply's tokens (mask 1) and the chat template's rendering of the server's messages between them
(mask 0: `env_mask`, no loss). The reward is the episode's: the hardened grade of its fix.

TRL hands `rollout_func` only the prompts, so the task id is the prompt (`task_dataset`). TRL's sampler repeats
each prompt `num_generations` times in a row, and the rollouts of one batch run in threads (one session each;
generation is serialized by a lock: one policy).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

#: the prompt of a dataset row names its task: "ssrkit task: <id>"
PROMPT_PREFIX = "ssrkit task: "

#: replies to replay instead of sampling, for some rollouts: (task id, index in the batch) → replies or None
Script = Callable[[str, int], "list[str] | None"]


def task_dataset(task_ids: list[str], repeat: int = 1) -> Any:
    """A `datasets.Dataset` whose rows name the tasks (conversational: TRL applies no template to them)."""
    from datasets import Dataset

    rows = [[{"role": "user", "content": PROMPT_PREFIX + t}] for t in task_ids] * repeat
    return Dataset.from_dict({"prompt": rows})


def task_of(prompt: Any) -> str:
    text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
    if not text.startswith(PROMPT_PREFIX):
        raise ValueError(f"a prompt of ssrkit's TRL dataset names its task ({PROMPT_PREFIX!r}…), got {text[:80]!r}")
    return text[len(PROMPT_PREFIX):].strip()


def env_reward(completions: list, env_reward: list[float], env_task: list[str], env_fix: list[str],
               log_extra: Callable | None = None, **_: Any) -> list[float]:
    """The reward function: the episode's own reward; the task and the fix go to TRL's completion logs."""
    if log_extra is not None:
        log_extra("task", list(env_task))
        log_extra("fix", list(env_fix))
    return [float(r) for r in env_reward]


def make_rollout_func(base_url: str, tokenizer: Any, *, max_new_tokens: int = 256, temperature: float = 1.0,
                      script: Script | None = None, message_timeout_s: float = 900.0) -> Callable:
    """TRL's `rollout_func` against the server at `base_url` (http://HOST:PORT). `message_timeout_s`: the last
    step grades the fix (two fresh sandboxes, test runs); OpenEnv's default of 60 s is too short for most repos."""
    lock = threading.Lock()

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        model = trainer.accelerator.unwrap_model(trainer.model)

        def one(i: int) -> dict[str, Any]:
            task = task_of(prompts[i])
            replies = script(task, i) if script is not None else None
            return _episode(base_url, tokenizer, model, task, replies, lock, max_new_tokens=max_new_tokens,
                            temperature=temperature, timeout=message_timeout_s)

        with ThreadPoolExecutor(len(prompts)) as pool:
            outs = list(pool.map(one, range(len(prompts))))
        return {"prompt_ids": [o["prompt_ids"] for o in outs], "completion_ids": [o["ids"] for o in outs],
                "logprobs": None, "env_mask": [o["mask"] for o in outs],
                "env_reward": [o["reward"] for o in outs], "env_task": [o["task"] for o in outs],
                "env_fix": [o["fix"] for o in outs]}

    return rollout_func


def _episode(base_url: str, tok: Any, model: Any, task: str, replies: list[str] | None, lock: threading.Lock, *,
             max_new_tokens: int, temperature: float, timeout: float) -> dict[str, Any]:
    from openenv.core import GenericEnvClient

    with GenericEnvClient(base_url=base_url, message_timeout_s=timeout).sync() as env:
        r = env.reset(task=task)
        messages = list(r.observation["messages"])
        prompt_ids = _ids(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))
        ids: list[int] = []
        mask: list[int] = []
        turn = 0
        while not r.done:
            if replies is not None:
                text = replies[min(turn, len(replies) - 1)]
                new = _ids(tok(text, add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]
                finish = "stop"
            else:
                new, finish = _generate(model, tok, prompt_ids + ids, lock, max_new_tokens, temperature)
                text = tok.decode(new, skip_special_tokens=True)
            ids += new
            mask += [1] * len(new)
            if new[-1] != tok.eos_token_id:  # cut off: the turn still ends, but that token is not the model's
                ids.append(tok.eos_token_id)
                mask.append(0)
            r = env.step({"message": text, "finish_reason": finish})
            turn += 1
            if r.done:
                break
            before = messages + [{"role": "assistant", "content": text}]
            suffix = template_suffix(tok, before, r.observation["messages"])
            messages = before + list(r.observation["messages"])
            ids += suffix
            mask += [0] * len(suffix)
        result = r.observation.get("result") or {}
        return {"prompt_ids": prompt_ids, "ids": ids, "mask": mask, "reward": float(r.reward or 0.0),
                "task": task, "fix": str(result.get("fix", ""))}


def _generate(model: Any, tok: Any, context: list[int], lock: threading.Lock, max_new_tokens: int,
              temperature: float) -> tuple[list[int], str]:
    import torch

    ctx = torch.tensor([context], device=model.device)
    with lock, torch.no_grad():
        out = model.generate(ctx, attention_mask=torch.ones_like(ctx), max_new_tokens=max_new_tokens, do_sample=True,
                             temperature=temperature, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    new = out[0, ctx.shape[1]:].tolist()
    return new, ("stop" if new and new[-1] == tok.eos_token_id else "length")


def template_suffix(tok: Any, before: list[dict[str, str]], new: list[dict[str, str]]) -> list[int]:
    """The tokens the chat template puts after the last assistant turn of `before` for the messages `new`, up to
    the next assistant turn's header (what the model reads between its replies). Assumes a template that ends a
    turn with the EOS token, as ChatML does."""
    full = _ids(tok.apply_chat_template(before + new, add_generation_prompt=True, tokenize=True))
    head = _ids(tok.apply_chat_template(before, tokenize=True))
    cut = max(i for i, t in enumerate(head) if t == tok.eos_token_id) + 1  # after the reply's EOS
    if full[:cut] != head[:cut]:
        raise ValueError("the chat template renders earlier turns differently once more follow; "
                         "ssrkit's TRL adapter needs a prefix-stable template (e.g. ChatML)")
    return full[cut:]


def _ids(out: Any) -> list[int]:
    """apply_chat_template's ids, whichever shape this transformers version returns."""
    if isinstance(out, dict) or hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)
