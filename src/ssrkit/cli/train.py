"""`ssrkit train`: GRPO on the policy from the rollouts in artifact directories (a thin CLI over ssrkit.train).

    ssrkit train runs/r1/artifacts --model Qwen3-8B/ --out runs/r1/policy
    accelerate launch --config_file recipes/accelerate/ddp.yaml -m ssrkit.train runs/r1/artifacts --model ... --out ...

Every flag can also be set in the `[train]` section of ssrkit.toml (flags win); the resolved configuration is
written to OUT/train_config.toml. To try it without a GPU or a model download, make a tiny model first:
    python -c "from ssrkit.train.tiny import save_tiny_model; save_tiny_model('tiny-model')"
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

_P = "Advantages"
_L = "Loss"
_O = "Optimisation"
_H = "Hardware"


def train(
    artifacts: Annotated[list[Path], typer.Argument(help="Artifact directories, or folders holding them.")],
    model: Annotated[Optional[str], typer.Option("--model", help="Policy checkpoint directory (Hugging Face).")] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Output directory: checkpoint, metrics, config.")] = None,
    config: Annotated[
        Optional[Path], typer.Option("--config", help="ssrkit.toml to read \\[train] from (default ./ssrkit.toml).")
    ] = None,
    resume: Annotated[
        Optional[bool], typer.Option("--resume/--no-resume", help="Continue the run in --out from its saved state.")
    ] = None,
    roles: Annotated[Optional[str], typer.Option(help="Roles to train on, comma-separated: solver,injector.")] = None,
    max_length: Annotated[Optional[int], typer.Option(help="Tokens per row; longer rows are cut.")] = None,
    std_scaling: Annotated[
        Optional[bool],
        typer.Option("--std-scaling/--no-std-scaling", rich_help_panel=_P, help="Divide advantages by the group std."),
    ] = None,
    leave_one_out: Annotated[
        Optional[bool],
        typer.Option(
            "--leave-one-out/--no-leave-one-out", rich_help_panel=_P, help="Baseline = mean of the other group members."
        ),
    ] = None,
    drop_zero_variance: Annotated[
        Optional[bool], typer.Option("--drop-zero-variance/--keep-zero-variance", rich_help_panel=_P)
    ] = None,
    singleton: Annotated[
        Optional[str],
        typer.Option(rich_help_panel=_P, help="Groups of one: baseline (per-role moving baseline) or drop."),
    ] = None,
    baseline_momentum: Annotated[
        Optional[float], typer.Option(rich_help_panel=_P, help="EMA weight of the previous per-role baseline.")
    ] = None,
    mask_statuses: Annotated[
        Optional[str], typer.Option(rich_help_panel=_P, help="Exit statuses that get no loss, comma-separated.")
    ] = None,
    drop_statuses: Annotated[
        Optional[str], typer.Option(rich_help_panel=_P, help="Exit statuses left out of group means, comma-separated.")
    ] = None,
    epsilon_low: Annotated[Optional[float], typer.Option(rich_help_panel=_L, help="Lower clip range (0.2).")] = None,
    epsilon_high: Annotated[Optional[float], typer.Option(rich_help_panel=_L, help="Upper clip range (0.28).")] = None,
    old_logprobs: Annotated[
        Optional[str], typer.Option(rich_help_panel=_L, help="PPO ratio against: sampler, initial or current.")
    ] = None,
    is_correction: Annotated[
        Optional[str], typer.Option(rich_help_panel=_L, help="Sampler mismatch correction: truncate, mask or none.")
    ] = None,
    is_cap: Annotated[Optional[float], typer.Option(rich_help_panel=_L, help="Importance-weight cap C.")] = None,
    kl_coef: Annotated[
        Optional[float], typer.Option(rich_help_panel=_L, help="KL to the initial policy (0 = off).")
    ] = None,
    lr: Annotated[Optional[float], typer.Option(rich_help_panel=_O, help="Learning rate (1e-6, constant).")] = None,
    warmup_steps: Annotated[Optional[int], typer.Option(rich_help_panel=_O)] = None,
    weight_decay: Annotated[Optional[float], typer.Option(rich_help_panel=_O)] = None,
    adam_beta1: Annotated[Optional[float], typer.Option(rich_help_panel=_O)] = None,
    adam_beta2: Annotated[Optional[float], typer.Option(rich_help_panel=_O)] = None,
    adam_eps: Annotated[Optional[float], typer.Option(rich_help_panel=_O)] = None,
    max_grad_norm: Annotated[
        Optional[float], typer.Option(rich_help_panel=_O, help="Gradient clipping (1.0; 0 = off).")
    ] = None,
    micro_batch_size: Annotated[
        Optional[int], typer.Option(rich_help_panel=_O, help="Rows per forward pass per process.")
    ] = None,
    grad_accum: Annotated[
        Optional[int], typer.Option(rich_help_panel=_O, help="Micro-batches per optimizer step.")
    ] = None,
    epochs: Annotated[Optional[int], typer.Option(rich_help_panel=_O)] = None,
    max_steps: Annotated[
        Optional[int], typer.Option(rich_help_panel=_O, help="Stop after this many steps (0 = all).")
    ] = None,
    seed: Annotated[Optional[int], typer.Option(rich_help_panel=_O)] = None,
    shuffle: Annotated[Optional[bool], typer.Option("--shuffle/--no-shuffle", rich_help_panel=_O)] = None,
    mixed_precision: Annotated[Optional[str], typer.Option(rich_help_panel=_H, help="auto, no, bf16 or fp16.")] = None,
    gradient_checkpointing: Annotated[
        Optional[str], typer.Option(rich_help_panel=_H, help="auto (on with a GPU), on, off.")
    ] = None,
    model_dtype: Annotated[
        Optional[str], typer.Option(rich_help_panel=_H, help="Training dtype of the weights.")
    ] = None,
    save_dtype: Annotated[
        Optional[str], typer.Option(rich_help_panel=_H, help="Checkpoint dtype (auto = the input's).")
    ] = None,
    attn_implementation: Annotated[Optional[str], typer.Option(rich_help_panel=_H)] = None,
    trust_remote_code: Annotated[
        Optional[bool], typer.Option("--trust-remote-code/--no-trust-remote-code", rich_help_panel=_H)
    ] = None,
    lora: Annotated[
        Optional[bool],
        typer.Option("--lora/--no-lora", rich_help_panel="LoRA",
                     help="Train a LoRA adapter (peft); OUT is an adapter `ssrkit serve --strategy lora` loads."),
    ] = None,
    lora_rank: Annotated[Optional[int], typer.Option(rich_help_panel="LoRA", help="Adapter rank (default 16).")] = None,
    lora_alpha: Annotated[Optional[float], typer.Option(rich_help_panel="LoRA", help="LoRA alpha (default 32).")] = None,
    lora_target_modules: Annotated[
        Optional[str],
        typer.Option(rich_help_panel="LoRA", help="Modules to adapt, comma-separated (default: attention and MLP)."),
    ] = None,
    save_every: Annotated[Optional[int], typer.Option(help="Steps between resumable states (0 = none).")] = None,
    keep_state: Annotated[
        Optional[bool], typer.Option("--keep-state/--no-keep-state", help="Keep OUT/state/ after a finished run.")
    ] = None,
    log_every: Annotated[Optional[int], typer.Option()] = None,
    allow_empty: Annotated[
        bool,
        typer.Option(
            "--allow-empty",
            help="Nothing to train on (no rewarded trajectories, only zero-variance groups) is a no-op: exit 0 "
            "without writing a checkpoint (for recipes, whose next round then keeps the current policy).",
        ),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
) -> None:
    """Train the policy with GRPO on solver and injector rollouts; write a checkpoint `vllm serve` can load."""
    overrides = {
        k: v for k, v in locals().items() if k not in ("artifacts", "config", "json_output", "verbose", "allow_empty")
    }
    from ssrkit.train import TrainError, require_train_deps, resolve_config, run_training
    from ssrkit.train.errors import NothingToTrain

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="ssrkit.train: %(message)s", stream=sys.stderr
    )
    for noisy in ("httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg = resolve_config(config, overrides)
        if not cfg.model:
            raise TrainError("no model given: pass --model PATH (or set model in [train] of ssrkit.toml)")
        if not cfg.out:
            raise TrainError("no output directory given: pass --out DIR (or set out in [train] of ssrkit.toml)")
        require_train_deps()
        summary = run_training(cfg, artifacts)
    except NothingToTrain as exc:
        if not allow_empty:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        if json_output:
            typer.echo(json.dumps({"out": cfg.out, "steps": 0, "empty": True, "reason": str(exc)}))
        else:
            typer.echo(f"nothing to train on, no checkpoint written (--allow-empty): {exc}")
        return
    except TrainError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not summary.pop("main_process", True):
        return  # under `accelerate launch`, rank 0 reports
    if json_output:
        typer.echo(json.dumps(summary))
    elif summary.get("skipped"):
        typer.echo(f"{summary['out']}: already trained ({summary['steps']} steps)")
    else:
        typer.echo(
            f"{summary['out']}: {summary['steps']} steps, {summary['rows']} rows, "
            f"{summary['tokens']} tokens, {summary['tokens_per_s']:.0f} tokens/s"
        )


def main(argv: list[str] | None = None) -> None:
    """`python -m ssrkit.train ARGS`: the same arguments as `ssrkit train`."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(train)
    app(args=argv, prog_name="ssrkit train")
