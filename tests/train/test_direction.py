"""The direction of the update: one GRPO step raises log p of a rewarded completion and lowers log p of a penalised
one, for each role, as a plain transformers forward on the checkpoint the step wrote measures it.

Every other test of the trainer would let these bugs through, and each test here fails on one of them (checked
by breaking the code on purpose): a flipped sign (in the group advantage or in the loss), a baseline left out
(equal rewards would still move the policy), an advantage paired with the wrong rollout (by position instead of
by attempt name), a loss mask that trains the tool output or is shifted by one token.

The group: two completions of one prompt, written with disjoint letters ("AB..." rewarded, "CD..." penalised), so
their log-probs hang on different weights and one step of AdamW (whose first update is lr * sign(gradient))
moves each one its own way. Roles: the solver (two attempts of one artifact), the injector (two injections of
one repository snapshot) and a task of a rollout file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from fixtures.repos import write_reward_json  # noqa: E402
from fixtures.training import conversation, make_trajectory, write_artifact  # noqa: E402

from ssrkit.rollout_file import rollout_record, write_rollouts  # noqa: E402
from ssrkit.train.config import TrainConfig  # noqa: E402
from ssrkit.train.loop import train  # noqa: E402

pytestmark = pytest.mark.train

PROMPT = [{"role": "system", "content": "You are a software engineer."}, {"role": "user", "content": "Fix the bug."}]
GOOD, BAD, OTHER = "AB BA AB BA", "CD DC CD DC", "EF FE EF FE"
LR = 1e-4  # modest: one AdamW step moves every weight by at most 1e-4
MARGIN = 1e-3  # nats: a move smaller than this is not a direction


def single_turn(tok, text: str, with_logprobs: bool) -> dict:
    """A one-turn trajectory with stored token ids; with the sampler's log-probs from the starting weights."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tok.name_or_path).eval() if with_logprobs else None
    return make_trajectory(tok, PROMPT + [{"role": "assistant", "content": text}], logprobs_model=model)


def completion_logprob(model_dir: Path, trajectories: list[dict]) -> list[float]:
    """log p(completion | prompt) of each single-turn trajectory: transformers and log_softmax, nothing of ssrkit."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    out = []
    with torch.no_grad():
        for t in trajectories:
            prompt, completion = t["turns"][0]["prompt_token_ids"], t["turns"][0]["completion_token_ids"]
            ids = torch.tensor([prompt + completion])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
            targets = ids[0, 1:]
            picked = logp.gather(-1, targets[:, None])[:, 0]
            out.append(float(picked[len(prompt) - 1:].sum()))
    return out


def write_group(root: Path, role: str, trajectories: list[dict], rewards: list[float], tok) -> Path:
    """The group on disk as `ssrkit train` reads it for `role`; returns the path to train on."""
    if role == "solver":  # attempts 001, 002 after an unfinished 000: rewards are paired by name (reward.json)
        unfinished = single_turn(tok, OTHER, with_logprobs=False)
        # every eval.json says failed: the rewards reach the trainer only through reward.json, by attempt name
        art = write_artifact(root, "art", [(unfinished, False)] + [(t, False) for t in trajectories])
        (art / "attempts" / "000" / "eval.json").unlink()
        record = json.loads((art / "reward.json").read_text())
        record.update(solver_rewards=rewards, attempts=["001", "002"], n_attempts=2)
        write_reward_json(art, record)  # current: bound to the finished attempts 001 and 002
        return root
    if role == "injector":  # two injections of one repository snapshot
        for i, (t, r) in enumerate(zip(trajectories, rewards)):
            write_artifact(root, f"inj{i}", [], injector=(t, r), repo="/repos/demo", commit="c0ffee")
        return root
    return write_rollouts(root / "rollouts.jsonl",
                          [rollout_record(t, role=role, group="p0", reward=r) for t, r in zip(trajectories, rewards)])


ROLES = ["solver", "injector", "echo-task"]
_runs: dict[tuple, tuple[list[float], list[float]]] = {}


@pytest.fixture
def step(tiny_model_dir, tiny_tok, tmp_path_factory):
    """One GRPO step on the group (GOOD, BAD) with `rewards`; returns log p of both before and after."""

    def run(role: str, old: str, rewards: tuple[float, float], **knobs):
        key = (role, old, rewards, tuple(sorted(knobs.items())))
        if key not in _runs:
            root = tmp_path_factory.mktemp("direction")
            trajectories = [single_turn(tiny_tok, text, with_logprobs=old == "sampler") for text in (GOOD, BAD)]
            source = write_group(root / "data", role, trajectories, list(rewards), tiny_tok)
            cfg = TrainConfig(model=str(tiny_model_dir), out=str(root / "out"), lr=LR, micro_batch_size=2,
                              grad_accum=1, max_steps=1, shuffle=False, old_logprobs=old, roles=[role], **knobs)
            summary = train(cfg, [source])
            assert summary["steps"] == 1 and summary["rows"] == 2
            _runs[key] = (completion_logprob(tiny_model_dir, trajectories),
                          completion_logprob(root / "out", trajectories), root / "out")
        return _runs[key]

    return run


@pytest.mark.parametrize("old", ["sampler", "initial"])
@pytest.mark.parametrize("role", ROLES)
def test_one_step_raises_the_rewarded_and_lowers_the_penalised(step, role, old):
    """`sampler`: the trajectories carry the sampler's log-probs (the starting weights': ratio 1); `initial`:
    they carry none and the old policy is recomputed from the starting checkpoint."""
    (good0, bad0), (good1, bad1), _ = step(role, old, (1.0, -1.0))
    assert good1 > good0 + MARGIN, (good0, good1)
    assert bad1 < bad0 - MARGIN, (bad0, bad1)


@pytest.mark.parametrize("role", ROLES)
def test_swapping_the_rewards_flips_the_direction(step, role):
    """For the solver, the rewards are paired with attempts 001 and 002 by name, after an unfinished 000:
    pairing by position would hand 000's reward to 001."""
    (good0, bad0), (good1, bad1), _ = step(role, "sampler", (1.0, -1.0))
    (_, _), (good2, bad2), _ = step(role, "sampler", (-1.0, 1.0))
    assert good1 > good0 + MARGIN and bad1 < bad0 - MARGIN
    assert good2 < good0 - MARGIN and bad2 > bad0 + MARGIN, ((good0, good2), (bad0, bad2))


def test_a_group_with_equal_rewards_moves_nothing(step, tiny_model_dir):
    """Kept on purpose (--keep-zero-variance): every advantage is reward - group mean = 0, so the step leaves
    every weight exactly as it was. A missing baseline (advantage = reward) would push both completions up."""
    (good0, bad0), (good1, bad1), out = step("solver", "sampler", (1.0, 1.0), drop_zero_variance=False)
    before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    moved = [k for k in before if not torch.equal(before[k], after[k])]
    assert moved == [] and (good1, bad1) == (good0, bad0)


def test_tool_output_tokens_get_zero_gradient(tiny_model_dir, tiny_tok, tmp_path):
    """A three-turn trajectory through the trainer's own path (rollout file -> rows -> batch -> forward -> loss):
    the gradient of the loss reaches the log-prob of every token the model sampled and of nothing else — not the
    tool output between turns, not the prompt. The truth is taken from the turns themselves: turn k's
    completion sits at len(prompt_k) in the row."""
    from transformers import AutoModelForCausalLM

    from ssrkit.train.batching import collate
    from ssrkit.train.examples import build_examples
    from ssrkit.train.loop import forward_logprobs
    from ssrkit.train.loss import grpo_token_loss
    from ssrkit.train.rollouts import read_rollouts

    trajectory = make_trajectory(tiny_tok, conversation("multi", 3))
    path = write_rollouts(tmp_path / "r.jsonl", [rollout_record(trajectory, role="solver", group="g", reward=1.0)])
    [rollout] = read_rollouts([path]).rollouts
    [example], _ = build_examples([(rollout, 1.0)], tiny_tok, 32768)
    sampled = torch.zeros(len(example.input_ids), dtype=torch.bool)
    for turn in trajectory["turns"]:
        start = len(turn["prompt_token_ids"])
        assert example.input_ids[:start] == turn["prompt_token_ids"]  # one row: each prompt extends the last
        sampled[start:start + len(turn["completion_token_ids"])] = True
    tool_output = ~sampled
    tool_output[: len(trajectory["turns"][0]["prompt_token_ids"])] = False  # the first prompt: not tool output
    assert tool_output.sum() > 10  # the tool output between the turns is there, and long

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    batch = collate([example], tiny_tok.pad_token_id)
    logp = forward_logprobs(model, batch)
    logp.retain_grad()
    loss, _ = grpo_token_loss(logp, batch["advantages"], batch["loss_mask"], batch["sampler_logprobs"])
    loss.backward()
    grad = logp.grad[0]  # grad[j] belongs to token j + 1
    assert torch.all(grad[tool_output[1:]] == 0)
    assert torch.all(grad[~sampled[1:]] == 0)
    assert torch.all(grad[sampled[1:]] != 0)
