"""The loss: exact zero gradient on masked tokens, the clipped surrogate, IS correction and KL by hand."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from ssrkit.train.loss import LossOptions, grpo_token_loss, token_logprobs  # noqa: E402
from ssrkit.train.tiny import tiny_model  # noqa: E402

pytestmark = pytest.mark.train


def test_masked_tokens_get_exactly_zero_gradient(tiny_tok):
    model = tiny_model(tiny_tok, seed=1)
    tail = [300, 301, 302, 303]  # ids used only after the last trained token, and only there
    ids = torch.tensor(
        [
            [5, 6, 7, 8, 9, 10, 11, 12] + tail,
            [5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27],
        ]
    )
    # mask over targets (position t predicts ids[:, t + 1])
    mask = torch.zeros(2, 11, dtype=torch.bool)
    mask[0, 3:7] = True  # targets ids[0, 4:8]; the tail (targets 7..10) is masked
    sampler = torch.full((2, 11), float("nan"))
    sampler[0, 3:7] = -5.0
    sampler[0, 8] = 50.0  # garbage on a masked position must not leak
    out = model(input_ids=ids)
    logits = out.logits
    logits.retain_grad()
    logp = token_logprobs(logits, ids)
    loss, stats = grpo_token_loss(logp, torch.tensor([1.0, -1.0]), mask, sampler, options=LossOptions())
    loss.backward()

    grad = logits.grad  # [2, 12, V]; logits[:, t] predicts ids[:, t + 1]
    per_position = grad.abs().sum(-1)
    assert torch.all(per_position[:, :-1][~mask] == 0)
    assert torch.all(per_position[:, -1] == 0)
    assert torch.all(per_position[:, :-1][mask] > 0)
    embed = model.get_input_embeddings().weight.grad
    assert torch.all(embed[tail] == 0)
    assert embed[[5, 6, 7]].abs().sum() > 0
    assert stats["tokens"].item() == 4


def test_all_masked_rows_give_zero_loss_and_gradient():
    logp = torch.randn(2, 5, requires_grad=True)
    loss, stats = grpo_token_loss(
        logp, torch.tensor([1.0, -1.0]), torch.zeros(2, 5, dtype=torch.bool), torch.full((2, 5), float("nan"))
    )
    loss.backward()
    assert loss.item() == 0 and torch.all(logp.grad == 0) and stats["tokens"].item() == 0


def _one(logp_value, sampler_value, advantage, **options):
    logp = torch.tensor([[logp_value]], requires_grad=True)
    sampler = torch.tensor([[sampler_value]])
    loss, stats = grpo_token_loss(
        logp, torch.tensor([advantage]), torch.ones(1, 1, dtype=torch.bool), sampler, options=LossOptions(**options)
    )
    loss.backward()
    return loss.item(), logp.grad.item(), {k: v.item() for k, v in stats.items()}


def test_clipped_surrogate_by_hand():
    # on-policy: ratio 1, loss -A, d loss / d logp = -A
    assert _one(-1.0, -1.0, 2.0)[:2] == pytest.approx((-2.0, -2.0))
    # A > 0, ratio 1.5 > 1 + 0.28: clipped, constant, no gradient
    loss, grad, stats = _one(math.log(1.5), 0.0, 1.0)
    assert (loss, grad, stats["clipped_high"]) == (pytest.approx(-1.28), 0.0, 1.0)
    # A < 0, ratio 0.5 < 1 - 0.2: clipped
    loss, grad, stats = _one(math.log(0.5), 0.0, -1.0)
    assert (loss, grad, stats["clipped_low"]) == (pytest.approx(0.8), 0.0, 1.0)
    # A > 0, ratio 0.5: unclipped, gradient ratio * (-A)
    assert _one(math.log(0.5), 0.0, 1.0)[:2] == pytest.approx((-0.5, -0.5))
    # no sampler log-prob: ratio against the detached current log-prob
    assert _one(-3.0, float("nan"), 1.0)[:2] == pytest.approx((-1.0, -1.0))


def test_importance_sampling_correction():
    # A < 0 and ratio 3 vs the sampler: unclipped branch, loss 3|A|
    assert _one(math.log(3.0), 0.0, -1.0, is_correction="none")[:2] == pytest.approx((3.0, 3.0))
    # truncate (dual clip at C = 2): constant 2|A|, no gradient
    loss, grad, stats = _one(math.log(3.0), 0.0, -1.0, is_correction="truncate", is_cap=2.0)
    assert (loss, grad, stats["is_corrected"]) == (pytest.approx(2.0), 0.0, 1.0)
    # mask: weight 3 outside [1/2, 2] -> dropped
    loss, grad, stats = _one(math.log(3.0), 0.0, -1.0, is_correction="mask", is_cap=2.0)
    assert (loss, grad, stats["is_corrected"]) == (0.0, 0.0, 1.0)
    # old = current: ratio 1, the sampler mismatch is a weight min(w, C)
    assert _one(math.log(3.0), 0.0, 1.0, old_logprobs="current", is_cap=2.0)[:2] == pytest.approx((-2.0, -2.0))
    assert _one(math.log(1.5), 0.0, 1.0, old_logprobs="current", is_cap=2.0)[:2] == pytest.approx((-1.5, -1.5))
    assert _one(math.log(3.0), 0.0, 1.0, old_logprobs="current", is_correction="mask")[:2] == (0.0, 0.0)
    # sampler mismatch statistic: k3(sampler || trainer) = 1/w + log w - 1
    stats = _one(math.log(1.5), 0.0, 1.0)[2]
    assert stats["mismatch_kl"] == pytest.approx(1 / 1.5 + math.log(1.5) - 1)


def test_kl_to_reference():
    logp = torch.tensor([[-1.0]], requires_grad=True)
    ref = torch.tensor([[-1.5]])
    loss, stats = grpo_token_loss(
        logp, torch.tensor([0.0]), torch.ones(1, 1, dtype=torch.bool), None, ref, LossOptions(kl_coef=0.1)
    )
    kl = math.exp(-0.5) + 0.5 - 1
    assert loss.item() == pytest.approx(0.1 * kl) and stats["kl"].item() == pytest.approx(kl)


def test_token_logprobs_with_temperature():
    logits = torch.randn(2, 4, 7)
    ids = torch.randint(0, 7, (2, 4))
    temp = torch.tensor([1.0, 0.5])
    got = token_logprobs(logits, ids, temp)
    want = torch.log_softmax(logits[:, :-1] / temp[:, None, None], -1).gather(-1, ids[:, 1:, None])[..., 0]
    assert torch.allclose(got, want, atol=1e-6)


def test_trimmed_forward_matches_the_full_one_on_trained_tokens(tiny_tok):
    from ssrkit.train.loop import forward_logprobs

    model = tiny_model(tiny_tok, seed=2)
    ids = torch.randint(3, 300, (2, 10))
    mask = torch.zeros(2, 9, dtype=torch.bool)
    mask[0, 5:] = True
    mask[1, 3:6] = True
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "loss_mask": mask, "temperature": torch.ones(2)}
    full = forward_logprobs(model, batch, trim=False)
    trimmed = forward_logprobs(model, batch, trim=True)
    assert torch.allclose(full[mask], trimmed[mask], atol=1e-5)
    assert torch.all(trimmed[:, :3] == 0)


def test_initial_policy_as_old():
    def one(logp_value, initial_value, sampler_value, advantage, **options):
        logp = torch.tensor([[logp_value]], requires_grad=True)
        loss, stats = grpo_token_loss(
            logp,
            torch.tensor([advantage]),
            torch.ones(1, 1, dtype=torch.bool),
            torch.tensor([[sampler_value]]),
            options=LossOptions(**options),
            initial_logp=torch.tensor([[initial_value]]),
        )
        loss.backward()
        return loss.item(), logp.grad.item(), {k: v.item() for k, v in stats.items()}

    nan = float("nan")
    # ratio 1.5 against the initial policy, A > 0: clipped at 1.28, no gradient
    loss, grad, stats = one(math.log(1.5), 0.0, nan, 1.0, old_logprobs="initial")
    assert (loss, grad, stats["clipped_high"]) == (pytest.approx(-1.28), 0.0, 1.0)
    # "sampler" falls back to the initial policy where the sampler's log-prob is unknown
    assert one(math.log(1.5), 0.0, nan, 1.0)[:2] == (pytest.approx(-1.28), 0.0)
    # "current" ignores it: ratio 1
    assert one(math.log(1.5), 0.0, nan, 1.0, old_logprobs="current")[:2] == pytest.approx((-1.0, -1.0))
    # decoupled PPO: ratio 1/3 against the initial policy, times the truncated weight min(initial/sampler, C) = 2
    loss, grad, stats = one(0.0, math.log(3.0), 0.0, 1.0, old_logprobs="initial", is_cap=2.0)
    assert (loss, grad, stats["is_corrected"]) == (pytest.approx(-2 / 3), pytest.approx(-2 / 3), 1.0)
    # an unknown initial log-prob (NaN) falls back to the current one
    assert one(math.log(1.5), nan, nan, 1.0, old_logprobs="initial")[:2] == pytest.approx((-1.0, -1.0))
