"""The GRPO training loop, top to bottom: rollouts on disk -> advantages -> rows -> optimizer steps -> checkpoint.

Runs the same under `python -m ssrkit.train` (one process) and `accelerate launch [--config_file ...] -m
ssrkit.train` (DDP, FSDP2, DeepSpeed). Every process reads the same rollouts and builds the same plan; each takes
its slice of every step.

Loss normalisation: the loss of a step is the sum of per-token losses divided by the number of trained tokens in
the whole step, counted across gradient-accumulation micro-batches and processes before the first backward. Each
micro-batch's loss is pre-multiplied by (processes x grad_accum) to undo the averaging that Accelerate
(1/grad_accum) and DDP/FSDP/ZeRO (1/processes) apply, so 1 x 4 and 4 x 1 micro-batches, or 1 and 2 processes,
give the same update.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import logging
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, set_seed
from transformers import AutoModelForCausalLM, AutoTokenizer

from ssrkit.train import checkpoint as ckpt
from ssrkit.train.advantages import AdvantageOptions, compute_advantages, summarize
from ssrkit.train.batching import collate_rows, local_micro_batches, step_plan
from ssrkit.train.config import TrainConfig, write_config
from ssrkit.train.errors import NothingToTrain, TrainError
from ssrkit.train.examples import Example, build_examples
from ssrkit.train.loss import LossOptions, grpo_token_loss, token_logprobs
from ssrkit.train.metrics import STAT_KEYS, MetricsWriter, step_record
from ssrkit.train.rollouts import read_rollouts

log = logging.getLogger("ssrkit.train")

def release_process_group() -> None:
    """Destroy the distributed process group, if any, before the process exits: a gloo group left to the
    interpreter's teardown can abort a rank ("terminate called without an active exception", exit -6)
    after a finished run. For the end of a process that trained, not between two `train` calls."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def make_accelerator(cfg: TrainConfig) -> Accelerator:
    """CPU forced when there is no GPU (so `torchrun`/`accelerate launch` give gloo DDP); bf16 on GPU by default."""
    on_gpu = torch.cuda.is_available()
    mixed = cfg.mixed_precision
    if mixed == "auto":
        if os.environ.get("ACCELERATE_MIXED_PRECISION"):
            mixed = None  # the launcher's config decides
        else:
            mixed = "bf16" if on_gpu and torch.cuda.is_bf16_supported() else "no"
    accelerator = Accelerator(cpu=not on_gpu, mixed_precision=mixed, gradient_accumulation_steps=cfg.grad_accum)
    check_accumulation(accelerator, cfg)
    warn_if_not_sharded(accelerator)
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is not None:  # a DeepSpeed config: let our knobs fill its "auto" values
        ds = plugin.deepspeed_config
        for key, value in (
            ("gradient_clipping", cfg.max_grad_norm),
            ("train_micro_batch_size_per_gpu", cfg.micro_batch_size),
            ("gradient_accumulation_steps", cfg.grad_accum),
        ):
            if ds.get(key, "auto") == "auto":
                ds[key] = value
        ds["train_batch_size"] = cfg.micro_batch_size * ds["gradient_accumulation_steps"] * accelerator.num_processes
    return accelerator


def warn_if_not_sharded(accelerator: Accelerator) -> None:
    """Accelerate only shards (FSDP, DeepSpeed) on accelerators: on the CPU an fsdp2/deepspeed config quietly
    becomes DDP, with the whole model on every process. Say so, since memory planning depends on it."""
    for env, kind, sharded in (
        ("ACCELERATE_USE_FSDP", "FSDP", DistributedType.FSDP),
        ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed", DistributedType.DEEPSPEED),
    ):
        requested = os.environ.get(env, "").lower() == "true"
        if requested and accelerator.distributed_type != sharded and accelerator.is_main_process:
            log.warning(
                "the accelerate config asks for %s, but Accelerate shards only on GPUs: this run on %s is %s, "
                "with the whole model on every process",
                kind,
                accelerator.device.type,
                accelerator.distributed_type.value,
            )


def prepare_reference(accelerator: Accelerator, model: Any) -> Any:
    """The frozen KL reference, placed like the policy. Accelerate leaves a model without an optimizer unwrapped
    under DeepSpeed, and under ZeRO-3 its weights were partitioned at load time, so it needs an inference engine
    of its own: ZeRO-3 keeps it sharded; below stage 3 it is small enough to hold whole (stage 0)."""
    if accelerator.distributed_type != DistributedType.DEEPSPEED:
        return accelerator.prepare_model(model, evaluation_mode=True)
    import deepspeed

    config = copy.deepcopy(accelerator.state.deepspeed_plugin.deepspeed_config)
    for training_only in ("optimizer", "scheduler"):
        config.pop(training_only, None)
    zero = config.setdefault("zero_optimization", {})
    zero.pop("offload_optimizer", None)
    if zero.get("stage", 0) != 3:
        zero["stage"] = 0
    engine, *_ = deepspeed.initialize(model=model, config=config)
    engine.eval()
    return engine


def check_accumulation(accelerator: Accelerator, cfg: TrainConfig) -> None:
    """The loss scaling assumes Accelerate accumulates exactly --grad-accum micro-batches per step."""
    if accelerator.gradient_accumulation_steps != cfg.grad_accum:
        raise TrainError(
            f"the accelerate/DeepSpeed config sets gradient_accumulation_steps={accelerator.gradient_accumulation_steps}"
            f" but --grad-accum is {cfg.grad_accum}: remove it from the config (or set it to auto) or pass"
            f" --grad-accum {accelerator.gradient_accumulation_steps}"
        )


def dtype_kwarg(dtype: Any) -> dict[str, Any]:
    """`from_pretrained`'s dtype argument: `dtype` since transformers 4.56, `torch_dtype` before."""
    import transformers
    from packaging.version import Version

    name = "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
    return {name: dtype}


def load_policy(cfg: TrainConfig, on_gpu: bool) -> Any:
    kwargs: dict[str, Any] = {"trust_remote_code": cfg.trust_remote_code}
    kwargs.update(dtype_kwarg("auto" if cfg.model_dtype == "auto" else getattr(torch, cfg.model_dtype)))
    if cfg.attn_implementation:
        kwargs["attn_implementation"] = cfg.attn_implementation
    adapter = ckpt.adapter_base(cfg.model)
    model = AutoModelForCausalLM.from_pretrained(adapter or cfg.model, **kwargs)
    model.config.use_cache = False
    if adapter or cfg.lora:
        model = with_lora(model, cfg, adapter_dir=cfg.model if adapter else None)
    if cfg.gradient_checkpointing == "on" or (cfg.gradient_checkpointing == "auto" and on_gpu):
        enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
        enable({"use_reentrant": False})
    return model


def with_lora(model: Any, cfg: TrainConfig, adapter_dir: str | None) -> Any:
    """`model` with a trainable LoRA adapter: the one in `adapter_dir` (continued), else a new one from `cfg`."""
    try:
        from peft import LoraConfig, PeftModel, get_peft_model
    except ImportError:
        raise TrainError("LoRA training needs peft: pip install 'ssrkit[train]'") from None
    if adapter_dir is not None:
        return PeftModel.from_pretrained(model, adapter_dir, is_trainable=True)
    config = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, target_modules=list(cfg.lora_target_modules),
                        lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # e.g. target modules the architecture does not have
        raise TrainError(f"cannot add a LoRA adapter: {str(exc).splitlines()[0]}") from None


def make_optimizer(model: Any, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW, the fused kernel where this torch has one for the parameters' device (as transformers' default)."""
    params = [p for p in model.parameters() if p.requires_grad]
    kwargs = dict(lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    try:
        return torch.optim.AdamW(params, fused=True, **kwargs)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, **kwargs)


def load_examples(cfg: TrainConfig, artifacts: Sequence[Path], tokenizer: Any, baselines: dict[str, float]):
    """Rollouts -> advantages -> rows. Returns (examples, new baselines, summary for data_summary.json)."""
    scan = read_rollouts(artifacts, cfg.roles)
    if not scan.rollouts:
        reasons = "; ".join(f"{n} {why}" for why, n in scan.skipped.items()) or "no trajectory.json found"
        where = " and ".join(f"{n} {what}" for n, what in ((scan.artifacts, "artifact(s)"),
                                                          (scan.files, "rollout file(s)")) if n)
        raise NothingToTrain(f"no trajectories with rewards in {where} ({reasons})")
    options = AdvantageOptions(
        std_scaling=cfg.std_scaling,
        leave_one_out=cfg.leave_one_out,
        drop_zero_variance=cfg.drop_zero_variance,
        singleton=cfg.singleton,
        baseline_momentum=cfg.baseline_momentum,
        mask_statuses=tuple(cfg.mask_statuses),
        drop_statuses=tuple(cfg.drop_statuses),
    )
    result = compute_advantages(scan.rollouts, options, baselines)
    roles = summarize(scan.rollouts, result)
    for role, s in roles.items():
        log.info(
            "%s: %d rollouts in %d groups (%d kept, %d zero-variance, %d singletons), %d trained, %d masked, "
            "reward mean %.3f, |advantage| mean %.3f",
            role,
            s["rollouts"],
            s["groups"],
            s["groups_kept"],
            s["groups_zero_variance"],
            s["singletons"],
            s["trained"],
            s["masked"],
            s["reward_mean"],
            s["advantage_abs_mean"],
        )
    items = [(r, a) for r, a in zip(scan.rollouts, result.advantages) if a is not None]
    examples, stats = build_examples(items, tokenizer, cfg.max_length)
    log.info(
        "rows: %d from %d trajectories (token ids: %d stored, %d re-rendered with the chat template), "
        "%d cut to %d tokens, %d trained tokens (%d from stored ids, %d re-tokenized; %d with sampler log-probs)",
        stats.rows,
        stats.trajectories,
        stats.paths.get("stored", 0),
        stats.paths.get("template", 0),
        stats.truncated_rows,
        cfg.max_length,
        stats.trained_tokens,
        stats.trained_tokens_by_path.get("stored", 0),
        stats.trained_tokens_by_path.get("template", 0),
        stats.with_logprobs,
    )
    for reason, tokens in sorted(stats.logprobs_dropped.items()):
        log.warning("sampler log-probs not used for %d trained tokens: %s; the old policy is recomputed instead "
                    "(--old-logprobs initial)", tokens, reason)
    if not examples:
        raise NothingToTrain(
            f"nothing to train on: {len(scan.rollouts)} rollouts, but every group has zero variance, is masked "
            "or has no trainable tokens (see the log above)"
        )
    summary = {
        "artifacts": scan.artifacts,
        "rollout_files": scan.files,
        "skipped": dict(scan.skipped),
        "roles": roles,
        "examples": stats.as_dict(),
        "groups": [dataclasses.asdict(g) for g in result.groups],
    }
    return examples, result.baselines, summary


def accepts_logits_to_keep(model: Any) -> bool:
    forward = getattr(model, "forward", None)
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        return False


def forward_logprobs(model: Any, batch: dict[str, torch.Tensor], trim: bool = True) -> torch.Tensor:
    """Log-probs of every target token, [B, T-1]. With `trim`, logits are only computed from the first trained
    position of the micro-batch on (the prompt before it needs no vocabulary projection); earlier positions are 0."""
    ids = batch["input_ids"]
    trained = batch["loss_mask"].any(dim=0)
    first = int(trained.float().argmax()) if trim and bool(trained.any()) else 0
    kwargs = {"logits_to_keep": ids.shape[1] - first} if first > 0 else {}
    out = model(input_ids=ids, attention_mask=batch["attention_mask"], use_cache=False, **kwargs)
    logp = token_logprobs(out.logits, ids[:, first:], batch["temperature"])
    if first > 0:
        logp = torch.cat([logp.new_zeros(ids.shape[0], first), logp], dim=1)
    return logp


def needs_initial_logprobs(cfg: TrainConfig, examples: Sequence[Example]) -> bool:
    """Whether the PPO ratio needs the starting policy's log-probs: always with --old-logprobs initial; with
    "sampler" when a row is trained more than once (epochs > 1) and some trained token has no sampler log-prob.
    (Against the detached current log-prob the ratio is 1 at every step and the clip never acts.)"""
    if cfg.old_logprobs == "initial":
        return True
    if cfg.old_logprobs == "sampler" and any(e.logprobs_dropped for e in examples):
        return True  # the sampler's log-probs were not comparable: the starting policy stands in for them
    if cfg.old_logprobs != "sampler" or cfg.epochs < 2:
        return False
    return any(m and math.isnan(s) for e in examples for m, s in zip(e.loss_mask, e.sampler_logprobs))


def initial_logprobs(
    model: Any,
    accelerator: Accelerator,
    examples: Sequence[Example],
    plan: Sequence[Sequence[int]],
    cfg: TrainConfig,
    pad_id: int,
    trim: bool,
) -> dict[int, torch.Tensor]:
    """The starting policy's log-probs on every row this process will train, from one no-grad pass before any
    update. Every process runs the same number of forward passes (FSDP and ZeRO-3 gather weights collectively)."""
    world, rank, size = accelerator.num_processes, accelerator.process_index, cfg.micro_batch_size
    mine = list(
        dict.fromkeys(
            i
            for step in plan
            for mb in local_micro_batches(step, rank, world, size, cfg.grad_accum)
            for i in mb
            if i is not None
        )
    )
    chunks: list[list[int | None]] = [list(mine[k : k + size]) for k in range(0, len(mine), size)]
    most = int(accelerator.gather(torch.tensor([len(chunks)], device=accelerator.device)).max())
    chunks += [[None] * size for _ in range(most - len(chunks))]
    out: dict[int, torch.Tensor] = {}
    with torch.no_grad():
        for chunk in chunks:
            batch = collate_rows(chunk, examples, pad_id)
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            logp = forward_logprobs(model, batch, trim).float().cpu()
            for j, i in enumerate(chunk):
                if i is not None:
                    out[i] = logp[j, : len(examples[i].input_ids) - 1].clone()
    return out


def warmup_lr(cfg: TrainConfig, step: int) -> float:
    """The learning rate of optimizer step `step` (0-based): linear warm-up over --warmup-steps, then --lr."""
    return cfg.lr * min(1.0, (step + 1) / cfg.warmup_steps) if cfg.warmup_steps else cfg.lr


def grpo_step(
    model: Any,
    optimizer: Any,
    accelerator: Accelerator,
    ref_model: Any,
    batches: Sequence[dict[str, torch.Tensor]],
    loss_options: LossOptions,
    lr: float,
    max_grad_norm: float,
    trim: bool,
    use_initial: bool,
) -> tuple[dict[str, float], Any]:
    """One optimizer step over `batches`, this process's micro-batches of the step: forward, GRPO loss, backward,
    clip, step. Accelerate's accumulation boundary must fall on the last of them (`train`: --grad-accum
    micro-batches a step; `follow`: as many as the step's batch has). The one place an update is made, for
    lock-step (`train`) and continuous (`follow`) training alike. Returns the step's statistics summed over
    every process (`STAT_KEYS`) and the gradient norm before clipping."""
    # the global count of trained tokens in this step: every process, every micro-batch
    local_tokens = torch.tensor(float(sum(int(b["loss_mask"].sum()) for b in batches)), device=accelerator.device)
    global_tokens = accelerator.reduce(local_tokens, reduction="sum").item()
    scale = accelerator.num_processes * accelerator.gradient_accumulation_steps / max(global_tokens, 1.0)
    for group in optimizer.param_groups:
        group["lr"] = lr
    grad_norm = None
    sums = torch.zeros(len(STAT_KEYS), dtype=torch.float64, device=accelerator.device)
    for batch in batches:
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        with accelerator.accumulate(model):
            logp = forward_logprobs(model, batch, trim)
            ref_logp = None
            if ref_model is not None:
                with torch.no_grad():
                    ref_logp = forward_logprobs(ref_model, batch, trim)
            loss_sum, stats = grpo_token_loss(
                logp,
                batch["advantages"],
                batch["loss_mask"],
                batch["sampler_logprobs"],
                ref_logp,
                loss_options,
                batch["initial_logprobs"] if use_initial else None,
            )
            accelerator.backward(loss_sum * scale)
            if accelerator.sync_gradients:
                max_norm = max_grad_norm if max_grad_norm > 0 else float("inf")
                grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        row_tokens = batch["loss_mask"].sum(dim=1).double()
        stats.update(
            {
                "total_tokens": batch["attention_mask"].sum().double(),
                "adv_sum": (batch["advantages"].double() * row_tokens).sum(),
                "adv_sq_sum": (batch["advantages"].double() ** 2 * row_tokens).sum(),
                "rows": (row_tokens > 0).double().sum(),
            }
        )
        sums += torch.stack([stats[k].detach().double() for k in STAT_KEYS])
    return dict(zip(STAT_KEYS, accelerator.reduce(sums, reduction="sum").tolist())), grad_norm


StepHook = Callable[[int, dict[str, Any], Any, Accelerator], None]


def load_models(cfg: TrainConfig, accelerator: Accelerator, on_gpu: bool) -> tuple[Any, Any, Any, bool]:
    """The policy (prepared for training), the frozen KL reference (None without KL), the optimizer, and whether
    the model's forward takes `logits_to_keep`."""
    try:
        model = load_policy(cfg, on_gpu)
    except (OSError, ValueError, KeyError) as exc:
        raise TrainError(f"cannot load a causal LM from {cfg.model}: {str(exc).splitlines()[0]}") from None
    ref_model = None
    if cfg.kl_coef > 0:
        ref_model = AutoModelForCausalLM.from_pretrained(  # the starting policy (an adapter dir loads with its base)
            cfg.model, trust_remote_code=cfg.trust_remote_code, **dtype_kwarg(model.dtype)
        )
        ref_model.requires_grad_(False).eval()
    model.train()
    trim = accepts_logits_to_keep(model)
    optimizer = make_optimizer(model, cfg)
    model, optimizer = accelerator.prepare(model, optimizer)
    check_accumulation(accelerator, cfg)
    if ref_model is not None:
        ref_model = prepare_reference(accelerator, ref_model)
    return model, ref_model, optimizer, trim


def train(cfg: TrainConfig, artifacts: Sequence[Path], on_step: StepHook | None = None) -> dict[str, Any]:
    """Train `cfg.model` on the rollouts below `artifacts`; write the checkpoint to `cfg.out`. Returns a summary.

    `on_step(step, metrics, model, accelerator)` runs on every process after each optimizer step (e.g. to push
    weights to a running sampler).
    """
    out = Path(cfg.out)
    if not cfg.model:
        raise TrainError("no model given (--model PATH)")
    if not cfg.out:
        raise TrainError("no output directory given (--out DIR)")
    if not Path(cfg.model).exists():
        raise TrainError(f"model path not found: {cfg.model}")

    # -- 1. processes, resume ----------------------------------------------------------------------------------
    accelerator = make_accelerator(cfg)
    on_gpu = accelerator.device.type == "cuda"
    if not accelerator.is_main_process:
        log.setLevel(logging.WARNING)
    prior = ckpt.read_trainer_state(out)
    if prior is not None and not cfg.resume:
        raise TrainError(f"{out} already holds a training run; pass --resume to continue it or choose another --out")
    if prior is not None and prior.get("done"):
        log.info("%s: training already finished at step %s; nothing to do", out, prior.get("step"))
        return {
            "out": str(out),
            "steps": prior.get("step", 0),
            "done": True,
            "skipped": True,
            "main_process": accelerator.is_main_process,
        }
    resuming = prior is not None and (out / ckpt.STATE_DIR).is_dir()
    accelerator.wait_for_everyone()  # every process has read the state before anyone writes to out/
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        write_config(cfg, out / ckpt.CONFIG_FILE)
    set_seed(cfg.seed)

    # -- 2. data: rollouts -> advantages -> rows ---------------------------------------------------------------
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.model, trust_remote_code=cfg.trust_remote_code)
    except (OSError, ValueError, KeyError) as exc:
        raise TrainError(f"cannot load a tokenizer from {cfg.model}: {str(exc).splitlines()[0]}") from None
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    baselines_before = prior["baselines_before"] if resuming else ckpt.read_baselines(cfg.model)
    examples, baselines_after, data_summary = load_examples(cfg, artifacts, tokenizer, baselines_before)
    if accelerator.is_main_process:
        ckpt.write_json(out / ckpt.DATA_SUMMARY_FILE, data_summary)

    # -- 3. model, reference, optimizer ------------------------------------------------------------------------
    model, ref_model, optimizer, trim = load_models(cfg, accelerator, on_gpu)
    loss_options = LossOptions(
        cfg.epsilon_low, cfg.epsilon_high, cfg.old_logprobs, cfg.is_correction, cfg.is_cap, cfg.kl_coef
    )

    # -- 4. the plan: which rows each step, process and micro-batch sees ---------------------------------------
    world, rank = accelerator.num_processes, accelerator.process_index
    global_batch = cfg.micro_batch_size * cfg.grad_accum * world
    plan = step_plan(len(examples), global_batch, cfg.epochs, cfg.seed, cfg.shuffle)
    steps_per_epoch = math.ceil(len(examples) / global_batch)
    if cfg.max_steps:
        plan = plan[: cfg.max_steps]
    start_step = int(prior["step"]) if resuming else 0
    initial: dict[int, torch.Tensor] = {}
    if needs_initial_logprobs(cfg, examples):  # before any update, and before a resumed state replaces the weights
        started = time.perf_counter()
        initial = initial_logprobs(model, accelerator, examples, plan[start_step:], cfg, pad_id, trim)
        log.info(
            "old log-probs: the initial policy's on %d rows (%.1f s), so the clipped ratio acts across steps%s",
            len(initial),
            time.perf_counter() - started,
            "" if cfg.old_logprobs == "initial" else " (in place of sampler log-probs that are missing or not comparable)",
        )
    if resuming:
        accelerator.load_state(str(out / ckpt.STATE_DIR))
        log.info("resumed %s at step %d of %d", out, start_step, len(plan))
    log.info(
        "%d rows, %d steps of %d rows (%d per micro-batch x %d accumulation x %d processes) on %s",
        len(examples),
        len(plan),
        global_batch,
        cfg.micro_batch_size,
        cfg.grad_accum,
        world,
        accelerator.device,
    )

    def trainer_state(step: int, done: bool = False) -> dict[str, Any]:
        return {
            "step": step,
            "steps": len(plan),
            "done": done,
            "baselines_before": baselines_before,
            "baselines_after": baselines_after,
            "world_size": world,
            "mixed_precision": str(accelerator.mixed_precision),
        }

    metrics = MetricsWriter(out / ckpt.METRICS_FILE, enabled=accelerator.is_main_process)
    total = {"tokens": 0.0, "seconds": 0.0}

    # -- 5. optimizer steps ------------------------------------------------------------------------------------
    if accelerator.is_main_process:
        metrics.truncate(after_step=start_step)  # drop records a stopped run wrote after its last saved state
    for step in range(start_step, len(plan)):
        started = time.perf_counter()
        batches = [
            collate_rows(mb, examples, pad_id, initial)
            for mb in local_micro_batches(plan[step], rank, world, cfg.micro_batch_size, cfg.grad_accum)
        ]
        lr = warmup_lr(cfg, step)
        s, grad_norm = grpo_step(model, optimizer, accelerator, ref_model, batches, loss_options, lr,
                                 cfg.max_grad_norm, trim, use_initial=bool(initial))

        # -- metrics -------------------------------------------------------------------------------------------
        seconds = time.perf_counter() - started
        total["tokens"] += s["total_tokens"]
        total["seconds"] += seconds
        record = step_record(s, step=step + 1, epoch=step // steps_per_epoch + 1, lr=lr, kl_coef=cfg.kl_coef,
                             grad_norm=grad_norm, seconds=seconds, device=accelerator.device)
        metrics.write(record)
        if on_step is not None:
            on_step(step + 1, record, model, accelerator)
        if (step + 1) % cfg.log_every == 0 or step + 1 == len(plan):
            log.info(
                "step %d/%d loss %.4f clip %.3f grad-norm %.3g %d tokens %.0f tok/s",
                step + 1,
                len(plan),
                record["loss"],
                record["clip_frac"],
                record["grad_norm"],
                record["tokens"],
                record["tokens_per_s"],
            )
        if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < len(plan):
            ckpt.save_state(accelerator, out, trainer_state(step + 1))

    # -- 6. the checkpoint -------------------------------------------------------------------------------------
    ckpt.save_hf_checkpoint(accelerator, model, tokenizer, out, ckpt.checkpoint_dtype(cfg.model, cfg.save_dtype))
    ckpt.finish(accelerator, out, cfg.model, len(plan), baselines_after, trainer_state(len(plan), done=True),
                cfg.keep_state)
    log.info("checkpoint written to %s", out)
    return {
        "out": str(out),
        "steps": len(plan),
        "rows": len(examples),
        "tokens": int(total["tokens"]),
        "seconds": round(total["seconds"], 3),
        "tokens_per_s": total["tokens"] / total["seconds"] if total["seconds"] else 0.0,
        "world_size": world,
        "done": True,
        "main_process": accelerator.is_main_process,
    }
