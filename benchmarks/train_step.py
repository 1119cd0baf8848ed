"""One GRPO optimizer step, ssrkit vs TRL's GRPOTrainer: tokens/s and peak memory, same tiny model, same batch.

    python benchmarks/train_step.py                       # CPU: well under 2 minutes
    python benchmarks/train_step.py --hidden 512 --layers 8 --completion 512

What is compared, and why it is fair:
- The same model (a tiny Qwen2 from `ssrkit.train.tiny`, saved once to disk and loaded by both) and the same
  batch: one prompt of --prompt tokens and --group (8) completions of --completion tokens each, with rewards
  alternating +1/-1, so both compute advantages of +-1 (no std scaling: TRL `scale_rewards="none"`).
- Generation is not measured. ssrkit trains from rollouts on disk; TRL is given the very same token ids through
  its `rollout_func` hook (no sampling at all) and a reward function that returns the fixed rewards.
- The same objective: clipped surrogate with eps 0.2 / 0.28, token-level normalisation over the whole batch
  (TRL `loss_type="dapo"`), no KL (TRL `beta=0`), one optimizer step per batch (TRL `num_iterations=1`), AdamW
  with lr 1e-6, constant schedule, gradient clipping at 1.0, no gradient checkpointing, float32 on CPU (bf16
  autocast on GPU for both). Both compute logits only for completion positions.
- Timing: wall time of whole optimizer steps (batch preparation, forward, backward, optimizer step), the median
  over --steps steps after one warm-up step. For TRL it is taken by a TrainerCallback between on_step_begin and
  on_step_end; for ssrkit it is the `seconds` of each step in metrics.jsonl. The fastest of --steps steps after
  one warm-up step is reported (the minimum is the estimate least disturbed by other load on the machine;
  `--repeat N` runs each framework N times, interleaved, and keeps the best).
  tokens/s = (prompt + completion tokens of all sequences in the step) / step time.
- Same numbers: the gradient norm of the first step is printed for both; equal values show that both computed
  the same loss on the same tokens (they agree to float32 precision on CPU).
- Memory: each framework runs in its own fresh subprocess. On CPU the peak RSS of the process (which includes
  the interpreter and imports; the RSS right after imports is printed too, so the training part can be read as
  the difference); on GPU torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_batch(tokenizer, args) -> tuple[list[int], list[list[int]], list[float]]:
    rng = random.Random(0)
    special = set(tokenizer.all_special_ids)
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    prompt = [rng.choice(vocab) for _ in range(args.prompt)]
    completions = [
        [rng.choice(vocab) for _ in range(args.completion - 1)] + [tokenizer.eos_token_id] for _ in range(args.group)
    ]
    rewards = [1.0 if i % 2 == 0 else -1.0 for i in range(args.group)]
    return prompt, completions, rewards


def peak_memory(torch) -> float:
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**20
    return rss_mb()


def run_ssrkit(args, model_dir: Path, work: Path) -> dict:
    import torch
    from transformers import AutoTokenizer

    from ssrkit.train.config import TrainConfig
    from ssrkit.train.loop import train

    base_rss = rss_mb()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt, completions, rewards = make_batch(tokenizer, args)
    art = work / "artifact"
    for i, (completion, reward) in enumerate(zip(completions, rewards)):
        attempt = art / "attempts" / f"{i:03d}"
        attempt.mkdir(parents=True)
        trajectory = {
            "format": "ssrkit.trajectory/1",
            "role": "solver",
            "exit_status": "submitted",
            "messages": [],
            "turns": [
                {"message_index": 2, "prompt_token_ids": prompt, "completion_token_ids": completion, "logprobs": None}
            ],
        }
        (attempt / "trajectory.json").write_text(json.dumps(trajectory))
        (attempt / "eval.json").write_text(
            json.dumps({"passed": reward > 0, "reason": "", "tests": {}, "exit_code": 0})
        )
    (art / "artifact.toml").write_text('id = "bench"\nbase_commit = "0"\n[repo]\nkind = "local"\npath = "/x"\n')
    cfg = TrainConfig(
        model=str(model_dir),
        out=str(work / "out"),
        micro_batch_size=args.group,
        grad_accum=1,
        epochs=args.steps + 1,
        shuffle=False,
        lr=1e-6,
        gradient_checkpointing="off",
        max_length=args.prompt + args.completion,
    )
    train(cfg, [art])
    records = [json.loads(line) for line in (work / "out" / "metrics.jsonl").read_text().splitlines()]
    seconds = min(r["seconds"] for r in records[1:])
    tokens = records[-1]["total_tokens"]
    return {
        "framework": "ssrkit",
        "step_s": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "peak_mb": peak_memory(torch),
        "import_rss_mb": base_rss,
        "grad_norm": records[0]["grad_norm"],
    }


def run_trl(args, model_dir: Path, work: Path) -> dict:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    base_rss = rss_mb()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt, completions, rewards = make_batch(tokenizer, args)
    reward_of = {tuple(c): r for c, r in zip(completions, rewards)}

    def rollout_func(prompts, trainer):  # replay the fixed completions instead of sampling
        return {
            "prompt_ids": [list(prompt) for _ in prompts],
            "completion_ids": [list(completions[i % args.group]) for i in range(len(prompts))],
            "logprobs": None,
        }

    def fixed_reward(prompts, completions, completion_ids, **kwargs):
        return [reward_of[tuple(ids)] for ids in completion_ids]

    step_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args_, state, control, **kwargs):
            self.t0 = time.perf_counter()

        def on_step_end(self, args_, state, control, **kwargs):
            step_times.append(time.perf_counter() - self.t0)

    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(work / "trl"),
        per_device_train_batch_size=args.group,
        num_generations=args.group,
        gradient_accumulation_steps=1,
        max_steps=args.steps + 1,
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        warmup_steps=0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="none",
        max_completion_length=args.completion,
        max_grad_norm=1.0,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        use_cpu=not on_gpu,
        bf16=on_gpu,
        gradient_checkpointing=False,
        seed=0,
        num_iterations=1,
        disable_tqdm=True,
    )
    dataset = Dataset.from_dict({"prompt": ["benchmark prompt"] * (args.steps + 1)})
    trainer = GRPOTrainer(
        model=str(model_dir),
        reward_funcs=fixed_reward,
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=rollout_func,
        callbacks=[StepTimer()],
    )
    trainer.train()
    seconds = min(step_times[1:])
    tokens = args.group * (args.prompt + args.completion)
    first = next(h for h in trainer.state.log_history if "grad_norm" in h)
    return {
        "framework": f"TRL {trl.__version__}",
        "step_s": seconds,
        "tokens": tokens,
        "tokens_per_s": tokens / seconds,
        "peak_mb": peak_memory(torch),
        "import_rss_mb": base_rss,
        "grad_norm": float(first["grad_norm"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6, help="timed steps (after one warm-up step)")
    parser.add_argument("--group", type=int, default=8, help="completions per prompt (the GRPO group)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--completion", type=int, default=256, help="tokens per completion")
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=1, help="run each framework this many times, keep the best")
    parser.add_argument("--only", choices=["ssrkit", "trl"], help="run one framework (used internally)")
    parser.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.only:
        import logging

        logging.disable(logging.WARNING)
        with tempfile.TemporaryDirectory() as tmp:
            runner = run_ssrkit if args.only == "ssrkit" else run_trl
            print("RESULT " + json.dumps(runner(args, args.model_dir, Path(tmp))), flush=True)
        return

    from ssrkit.train.tiny import save_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = save_tiny_model(Path(tmp) / "model", hidden_size=args.hidden, num_layers=args.layers)
        runs: dict[str, list[dict]] = {}
        for name in ("ssrkit", "trl") * args.repeat:  # interleaved, so that a burst of load hits both
            cmd = [sys.executable, __file__, "--only", name, "--model-dir", str(model_dir)]
            for key in ("steps", "group", "prompt", "completion", "hidden", "layers"):
                cmd += [f"--{key}", str(getattr(args, key))]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not lines:
                print(f"{name} failed:\n{proc.stderr[-4000:]}", file=sys.stderr)
                continue
            runs.setdefault(name, []).append(json.loads(lines[-1][len("RESULT ") :]))
        results = []
        for rs in runs.values():
            best = min(rs, key=lambda r: r["step_s"])
            results.append({**best, "peak_mb": max(r["peak_mb"] for r in rs)})

    import torch

    memory = "peak CUDA MiB" if torch.cuda.is_available() else "peak RSS MiB"
    print(
        f"GRPO step: tiny Qwen2 (hidden {args.hidden}, {args.layers} layers), {args.group} x "
        f"({args.prompt} prompt + {args.completion} completion) tokens, "
        f"{'GPU' if torch.cuda.is_available() else 'CPU'}, best of {args.steps} steps x {args.repeat} run(s)"
    )
    header = f"{'framework':<14}{'step s':>9}{'tokens/s':>11}{memory:>15}{'RSS after imports':>19}{'grad norm 1':>13}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['framework']:<14}{r['step_s']:>9.3f}{r['tokens_per_s']:>11.0f}{r['peak_mb']:>15.0f}"
            f"{r['import_rss_mb']:>19.0f}{r['grad_norm']:>13.6f}"
        )


if __name__ == "__main__":
    main()
