"""TRL's GRPOTrainer (CPU, the tiny model, two steps) against `ssrkit env serve` on two valid example artifacts.

Each group is one oracle replay (the reverse of bug_inject.diff applied with bash, then submit) and one reply
sampled from the policy (a random tiny model: never a valid tool call, so -1): a non-degenerate group. Checked:
the rewards TRL logged per completion equal ssrkit's own grades of the same fixes (re-graded here, in process),
and the update's direction: the oracle reply's log-probability rose.
"""

from __future__ import annotations

import os
import shlex

import pytest

from fixtures.scripted_server import bash, submit
from ssrkit import patch as patches
from ssrkit.store.source import RepoSource
from ssrkit.verdict.rewards import solver_reward

from fixtures.env_tier import EnvServer

pytestmark = pytest.mark.train

G = 2


def oracle_replies(art) -> list[str]:
    fix = patches.reverse(art.bug_diff)
    return [bash(f"printf %s {shlex.quote(fix)} | git apply -"), submit()]


def reply_logprob(model, tok, prompt_ids: list[int], reply: str) -> float:
    """Mean log-prob of the reply's tokens (and its EOS) after the prompt."""
    import torch

    reply_ids = tok(reply, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.tensor([prompt_ids + reply_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(reply_ids)[:, None]).mean().item()


def test_grpo_on_ssrkit_env_logs_ssrkit_rewards_and_raises_the_rewarded_reply(
        slug_validated, tie_validated, textkit_repo, server_config, engine, tmp_path, monkeypatch):
    import pandas as pd
    import importlib

    # tests/vllm (no __init__.py) is a namespace package named "vllm" on the tests' sys.path: TRL would take it
    # for vLLM and fail on its version. This venv has no vLLM (make test-vllm keeps it in its own venv).
    monkeypatch.setattr(importlib.import_module("trl.import_utils"), "is_vllm_available", lambda *a, **k: False)
    from trl import GRPOConfig, GRPOTrainer

    from ssrkit.env.trl import env_reward, make_rollout_func, task_dataset
    from ssrkit.train.tiny import tiny_model, tiny_tokenizer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    arts = {a.id: a for a in (slug_validated, tie_validated)}
    srv = EnvServer([str(slug_validated.path), str(tie_validated.path), "--repo", str(textkit_repo),
                     "--config", str(server_config), "--max-turns", "2", "--max-sessions", "4"], cwd=tmp_path)
    try:
        tok = tiny_tokenizer()
        model = tiny_model(tok)
        script = lambda task, i: oracle_replies(arts[task]) if i % G == 0 else None  # noqa: E731
        # the oracle's first reply on the slug task, before training (its prompt as the server sends it)
        from openenv.core import GenericEnvClient

        with GenericEnvClient(base_url=srv.url, message_timeout_s=600).sync() as env:
            first = env.reset(task=slug_validated.id).observation["messages"]
        prompt_ids = list(tok.apply_chat_template(first, add_generation_prompt=True, tokenize=True)["input_ids"])
        reply = oracle_replies(slug_validated)[0]
        before = reply_logprob(model, tok, prompt_ids, reply)

        args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=False, fp16=False, max_steps=2,
                          per_device_train_batch_size=G, num_generations=G, max_completion_length=16384,
                          learning_rate=5e-3, beta=0.0, logging_steps=1, report_to="none", log_completions=True,
                          save_strategy="no", seed=0, gradient_checkpointing=False, dataloader_num_workers=0)
        trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=env_reward, args=args,
                              train_dataset=task_dataset(sorted(arts)),  # one task a step, each once
                              rollout_func=make_rollout_func(srv.url, tok, max_new_tokens=16, script=script))
        trainer.train()
    finally:
        srv.stop()

    logged = pd.concat([pd.read_parquet(tmp_path / "out" / "completions" / f)
                        for f in sorted(os.listdir(tmp_path / "out" / "completions"))])
    assert len(logged) == 2 * G and set(logged["task"]) == set(arts)
    assert sorted(set(logged["env_reward"])) == [-1.0, 1.0]
    # ssrkit's own grade of each fix TRL trained on (each distinct one once, in process)
    grades = {}
    for task, fix in sorted(set(zip(logged["task"], logged["fix"]))):
        grades[task, fix] = solver_reward(engine.grade_fix(arts[task], RepoSource.local(textkit_repo), fix).passed)
    assert [grades[t, f] for t, f in zip(logged["task"], logged["fix"])] == list(logged["env_reward"])
    assert any(v == 1.0 for v in grades.values()) and any(v == -1.0 for v in grades.values())
    # the rewarded reply became more likely
    after = reply_logprob(trainer.model, tok, prompt_ids, reply)
    assert after > before + 0.05, (before, after)
