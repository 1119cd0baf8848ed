"""Real optimizer steps through the Accelerate loop: every parameter moves, accumulation is exact, the
checkpoint reloads with transformers and generates."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from safetensors.torch import load_file  # noqa: E402

from ssrkit.train.config import TrainConfig  # noqa: E402
from ssrkit.train.loop import train  # noqa: E402

pytestmark = pytest.mark.train


def run(arts, model_dir, out, **overrides):
    cfg = TrainConfig(model=str(model_dir), out=str(out), **{"shuffle": False, **overrides})
    return train(cfg, arts)


@pytest.fixture(scope="module")
def arts(tmp_path_factory, artifact_factory_module):
    return artifact_factory_module(tmp_path_factory.mktemp("arts"))


@pytest.fixture(scope="module")
def artifact_factory_module(tiny_tok):
    from fixtures.training import conversation, make_trajectory, write_artifact

    def build(root):
        return [
            write_artifact(
                root,
                "alpha",
                [
                    (make_trajectory(tiny_tok, conversation("alpha0", 3)), True),
                    (make_trajectory(tiny_tok, conversation("alpha1", 1)), False),
                    (make_trajectory(tiny_tok, conversation("al2", 2), stored=False), False),
                    (make_trajectory(tiny_tok, conversation("alpha_three", 2), stored=False), True),
                ],
            ),
        ]

    return build


def test_one_step_changes_every_parameter(arts, tiny_model_dir, tmp_path):
    summary = run(arts, tiny_model_dir, tmp_path / "out", lr=1e-2, micro_batch_size=2, grad_accum=2, max_steps=1)
    assert summary["steps"] == 1
    before = load_file(tiny_model_dir / "model.safetensors")
    after = load_file(tmp_path / "out" / "model.safetensors")
    assert before.keys() == after.keys()
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert unchanged == []
    record = json.loads((tmp_path / "out" / "metrics.jsonl").read_text().splitlines()[0])
    assert record["rows"] == 4 and record["tokens"] > 0 and record["grad_norm"] > 0


def test_one_vs_four_accumulation_steps_give_the_same_update(arts, tiny_model_dir, tmp_path):
    # AdamW with a huge eps makes the first update ~ lr/eps * gradient, so a wrongly scaled gradient would show
    knobs = dict(lr=100.0, adam_eps=1e4, max_grad_norm=0.0, max_steps=1)
    run(arts, tiny_model_dir, tmp_path / "a", micro_batch_size=4, grad_accum=1, **knobs)
    run(arts, tiny_model_dir, tmp_path / "b", micro_batch_size=1, grad_accum=4, **knobs)
    run(arts, tiny_model_dir, tmp_path / "c", micro_batch_size=2, grad_accum=2, **knobs)
    before = load_file(tiny_model_dir / "model.safetensors")
    a, b, c = (load_file(tmp_path / d / "model.safetensors") for d in "abc")
    moved = max((a[k] - before[k]).abs().max().item() for k in a)
    assert moved > 1e-4
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-7, rtol=1e-5), k
        assert torch.allclose(a[k], c[k], atol=1e-7, rtol=1e-5), k
    ma, mb = (json.loads((tmp_path / d / "metrics.jsonl").read_text()) for d in "ab")
    assert ma["tokens"] == mb["tokens"] and ma["loss"] == pytest.approx(mb["loss"], rel=1e-5)


def test_checkpoint_reloads_and_generates(arts, tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "ckpt"
    run(arts, tiny_model_dir, out, lr=1e-3, micro_batch_size=2, grad_accum=1)
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "train_config.toml",
        "metrics.jsonl",
        "data_summary.json",
        "baselines.json",
    ):
        assert (out / name).is_file(), name
    assert not (out / "state").exists()
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.use_cache is True
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    ids = tok(prompt, return_tensors="pt", add_special_tokens=False)
    generated = model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert generated.shape[1] == ids["input_ids"].shape[1] + 4
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_resume_continues_from_the_saved_state(arts, tiny_model_dir, tmp_path):
    from ssrkit.train.errors import TrainError

    knobs = dict(lr=1e-3, micro_batch_size=1, grad_accum=1, epochs=2, save_every=3)
    full = tmp_path / "full"
    run(arts, tiny_model_dir, full, **knobs)
    part = tmp_path / "part"
    run(arts, tiny_model_dir, part, max_steps=3, keep_state=True, **{k: v for k, v in knobs.items()})
    # pretend the run stopped after step 3 (its saved state), then resume the full schedule
    state = json.loads((part / "trainer_state.json").read_text())
    state.update(done=False, step=3)
    (part / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(TrainError, match="--resume"):
        run(arts, tiny_model_dir, part, **knobs)
    run(arts, tiny_model_dir, part, resume=True, **knobs)
    a, b = load_file(full / "model.safetensors"), load_file(part / "model.safetensors")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k
    steps = [json.loads(line)["step"] for line in (part / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))
    again = run(arts, tiny_model_dir, part, resume=True, **knobs)
    assert again["skipped"]


def test_initial_policy_logprobs_let_the_clip_act_across_epochs(arts, tiny_model_dir, tmp_path):
    """Without sampler log-probs, "old" = the detached current log-prob keeps the ratio at 1 in every epoch; the
    initial policy's log-probs (computed once, before the first update) make later epochs' ratios move and clip."""
    knobs = dict(lr=1e-2, micro_batch_size=1, grad_accum=1, epochs=2)

    def metrics(out):
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    current, initial, auto = (tmp_path / d for d in ("current", "initial", "auto"))
    run(arts, tiny_model_dir, current, old_logprobs="current", **knobs)
    run(arts, tiny_model_dir, initial, old_logprobs="initial", **knobs)
    run(arts, tiny_model_dir, auto, **knobs)  # "sampler", but these rows have no sampler log-probs
    cur, ini, aut = metrics(current), metrics(initial), metrics(auto)
    assert len(cur) == len(ini) == 8
    assert all(m["clip_frac"] == 0 for m in cur)
    assert ini[0]["clip_frac"] == 0 and ini[0]["loss"] == pytest.approx(cur[0]["loss"], rel=1e-5)
    assert max(m["clip_frac"] for m in ini[4:]) > 0.05  # epoch 2: the policy has moved away from the sampler's
    assert [m["loss"] for m in aut] == pytest.approx([m["loss"] for m in ini], rel=1e-6)

    # resumed mid-run, the initial log-probs come from the starting checkpoint, not the resumed weights
    part = tmp_path / "part"
    run(arts, tiny_model_dir, part, old_logprobs="initial", max_steps=5, keep_state=True, save_every=5, **knobs)
    state = json.loads((part / "trainer_state.json").read_text())
    state.update(done=False, step=5)
    (part / "trainer_state.json").write_text(json.dumps(state))
    run(arts, tiny_model_dir, part, old_logprobs="initial", resume=True, **knobs)
    a, b = load_file(initial / "model.safetensors"), load_file(part / "model.safetensors")
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-6), k


def test_lora_writes_an_adapter_that_moves_the_policy_and_continues(arts, tiny_model_dir, tmp_path):
    """--lora: OUT is a peft adapter (what `ssrkit serve --strategy lora --refresh` loads); the base weights are
    not written; a --model that is an adapter directory continues training that adapter."""
    pytest.importorskip("peft")
    import json

    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "adapter"
    run(arts, tiny_model_dir, out, lora=True, lora_rank=4, lr=1e-2, micro_batch_size=2, grad_accum=1, max_steps=2)
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["base_model_name_or_path"] == str(tiny_model_dir)
    assert (out / "adapter_model.safetensors").is_file() and not (out / "model.safetensors").exists()
    assert not (out / "config.json").exists()  # an adapter directory, not a checkpoint
    lora = load_file(out / "adapter_model.safetensors")
    assert lora and all("lora_" in k for k in lora) and any(v.abs().sum() > 0 for k, v in lora.items() if "lora_B" in k)

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    merged = PeftModel.from_pretrained(base, out).merge_and_unload()
    before = load_file(tiny_model_dir / "model.safetensors")
    moved = [k for k, v in merged.state_dict().items() if k in before and not torch.equal(v, before[k])]
    assert any("q_proj" in k for k in moved) and not any("embed_tokens" in k for k in moved)

    again = tmp_path / "adapter2"
    run(arts, out, again, lr=1e-2, micro_batch_size=2, grad_accum=1, max_steps=1)  # no --lora: the dir says so
    second = load_file(again / "adapter_model.safetensors")
    assert set(second) == set(lora) and any(not torch.equal(second[k], lora[k]) for k in lora)
