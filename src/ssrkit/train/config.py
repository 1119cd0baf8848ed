"""`TrainConfig`: every knob of `ssrkit train`, resolved from defaults < `[train]` in ssrkit.toml < flags.

No torch here: the CLI resolves and validates the configuration before the heavy imports.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ssrkit.errors import SsrkitError
from ssrkit.store.config import load_settings, setting
from ssrkit.store.fsutil import atomic_write_text
from ssrkit.store.trajectory import DROP_STATUSES, LIMIT_STATUSES
from ssrkit.train.errors import TrainError

if TYPE_CHECKING:
    from ssrkit.store.config import Config

ROLES = ("solver", "injector")


#: the --help panels of `ssrkit train`: a field's group is the helper that declares it
RUN, ROWS, ADVANTAGES, LOSS, OPTIM, HARDWARE, LORA, OUTPUTS, FOLLOW = (
    partial(setting, panel=p) for p in ("Run", "Training rows", "Advantages", "Loss", "Optimisation", "Hardware",
                                        "LoRA", "Outputs", "Continuous training"))


@dataclass
class TrainConfig:
    """Every knob of `ssrkit train`: each field's help and panel are its `--help` text and the docs' (field
    metadata, `ssrkit.store.config.setting`), so a new field documents itself where it is declared."""

    SECTION: ClassVar[str] = "train"

    model: str = RUN('', help='Hugging Face checkpoint directory (or any id from_pretrained accepts offline)')
    out: str = RUN('', help='output: HF checkpoint + metrics.jsonl + train_config.toml (+ state/ while running)')
    resume: bool = RUN(False, help='continue from out/state/ after a stop')
    roles: list[str] = RUN(factory=list,
        help="roles to train on (solver, injector, a rollout file's task names); empty: all")

    max_length: int = ROWS(32768, help='tokens per training row; longer rows are cut (the head is kept)')

    std_scaling: bool = ADVANTAGES(False, help="divide by the group's std (GRPO-original); off by default (Dr. GRPO)")
    leave_one_out: bool = ADVANTAGES(False, help='baseline = mean of the other group members')
    drop_zero_variance: bool = ADVANTAGES(True, help='groups whose rewards are all equal teach nothing')
    singleton: str = ADVANTAGES('baseline', help='a group of one: "baseline" (per-role moving baseline) or "drop"')
    baseline_momentum: float = ADVANTAGES(0.9, help='EMA weight of the old per-role baseline across rounds')
    mask_statuses: list[str] = ADVANTAGES(
        factory=lambda: list(LIMIT_STATUSES), help='exit statuses whose tokens get no loss')
    drop_statuses: list[str] = ADVANTAGES(
        factory=lambda: list(DROP_STATUSES), help='exit statuses left out of group means too')

    epsilon_low: float = LOSS(0.2, help='lower clip range of the PPO ratio')
    epsilon_high: float = LOSS(0.28, help='upper clip range (clip-higher)')
    old_logprobs: str = LOSS('sampler',
        help='PPO ratio against: "sampler" log-probs where stored (elsewhere the initial policy\'s when epochs > 1, else the current ones), "initial" (the starting checkpoint\'s, one no-grad pass) or "current" (detached: ratio 1)')
    is_correction: str = LOSS('truncate', help='sampler/trainer mismatch: "truncate", "mask" or "none"')
    is_cap: float = LOSS(2.0,
        help='importance weights are capped at C (truncate) or kept only within [1/C, C] (mask)')
    kl_coef: float = LOSS(0.0, help='KL to the frozen initial policy (k3 estimator); 0 loads no reference model')

    lr: float = OPTIM(1e-06, help='learning rate')
    warmup_steps: int = OPTIM(0, help='linear warm-up, then constant')
    weight_decay: float = OPTIM(0.0, help='AdamW weight decay')
    adam_beta1: float = OPTIM(0.9, help='AdamW beta1')
    adam_beta2: float = OPTIM(0.999, help='AdamW beta2')
    adam_eps: float = OPTIM(1e-08, help='AdamW epsilon')
    max_grad_norm: float = OPTIM(1.0, help='gradient clipping norm (0 disables clipping)')
    micro_batch_size: int = OPTIM(1, help='rows per forward/backward per process')
    grad_accum: int = OPTIM(8,
        help='micro-batches per optimizer step; global batch = micro_batch_size*grad_accum*processes')
    epochs: int = OPTIM(1, help='passes over the rollouts')
    max_steps: int = OPTIM(0, help='stop after this many steps (0 = as many as the epochs need)')
    seed: int = OPTIM(0, help='shuffling and initialisation seed')
    shuffle: bool = OPTIM(True, help='shuffle the rows each epoch')

    mixed_precision: str = HARDWARE('auto', help="auto (bf16 on GPU, else the launcher's/none), no, bf16, fp16")
    gradient_checkpointing: str = HARDWARE('auto', help='auto (on with a GPU), on, off')
    model_dtype: str = HARDWARE('float32', help='dtype the weights are trained in (master weights)')
    save_dtype: str = HARDWARE('auto', help="dtype written to the checkpoint; auto = the input checkpoint's dtype")
    attn_implementation: str = HARDWARE('', help='"" = transformers\' default (sdpa)')
    trust_remote_code: bool = HARDWARE(False, help="let transformers run the checkpoint's own model code")

    lora: bool = LORA(False, help='train a LoRA adapter; OUT is then an adapter directory')
    lora_rank: int = LORA(16, help="adapter rank (vLLM's default --max-lora-rank is 16)")
    lora_alpha: float = LORA(32.0, help='LoRA scaling alpha')
    lora_target_modules: list[str] = LORA(
        factory=lambda: ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'],
        help='modules to adapt: attention and MLP projections')

    save_every: int = OUTPUTS(0, help='steps between resumable states (0 = only at the end of an interrupted run)')
    keep_state: bool = OUTPUTS(False, help='keep out/state/ (optimizer etc.) after a finished run')
    log_every: int = OUTPUTS(1, help='steps between metric lines')

    follow: str = FOLLOW('',
        help='run directory to follow (then no ARTIFACTS; checkpoints go to RUN/follow/checkpoints)')
    max_staleness: int = FOLLOW(8,
        help='rollouts sampled more than this many optimizer steps ago get no loss (counted stale)')
    unknown_staleness: str = FOLLOW('keep',
        help='rollouts whose sampling version is unknown: keep (train, warn) or drop')
    groups_per_step: int = FOLLOW(8, help='complete groups per optimizer step')
    max_wait: float = FOLLOW(0.0,
        help='seconds to wait for groups_per_step before stepping with fewer (0: always wait)')
    poll: float = FOLLOW(5.0, help='seconds between scans of the run directory')
    refresh_pid_file: list[str] = FOLLOW(factory=list,
        help='detached servers (ssrkit serve --detach --pid-file) moved to each new step')
    keep_checkpoints: int = FOLLOW(0,
        help='committed steps kept on disk (0: max_staleness + 2); the root is never removed')
    exit_when_idle: float = FOLLOW(0.0, help='stop after this many seconds without a complete group (0: never)')

    @classmethod
    def from_config(cls, cfg: "Config", **flags: Any) -> "TrainConfig":
        """`[train]` of the resolved configuration, then `flags` (None = not given), coerced and checked."""
        try:
            config = load_settings(cls, cfg, **flags)
        except SsrkitError as e:
            raise TrainError(str(e)) from None
        validate_config(config)
        return config


_CHOICES = {
    "singleton": ("baseline", "drop"),
    "old_logprobs": ("sampler", "initial", "current"),
    "is_correction": ("truncate", "mask", "none"),
    "mixed_precision": ("auto", "no", "bf16", "fp16"),
    "gradient_checkpointing": ("auto", "on", "off"),
    "model_dtype": ("float32", "bfloat16", "float16", "auto"),
    "save_dtype": ("auto", "float32", "bfloat16", "float16"),
    "unknown_staleness": ("keep", "drop"),
}


def resolve_config(config_file: Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, then `[train]` of `config_file` (or $SSRKIT_CONFIG, or ./ssrkit.toml when it exists: the one
    configuration every command reads, `ssrkit.store.config`), then `overrides` (flags; None = not given)."""
    from ssrkit.store.config import load_config
    from ssrkit.errors import SsrkitError

    try:
        cfg = load_config(config_file)
    except SsrkitError as e:
        raise TrainError(str(e)) from None
    return TrainConfig.from_config(cfg, **(overrides or {}))


def validate_config(cfg: TrainConfig) -> None:
    for name, choices in _CHOICES.items():
        if getattr(cfg, name) not in choices:
            raise TrainError(f"{name} must be one of {', '.join(choices)}; got {getattr(cfg, name)!r}")
    if any(not r.strip() for r in cfg.roles):
        raise TrainError(f"roles must be role or task names (e.g. {', '.join(ROLES)}); got {cfg.roles}")
    positive = ("max_length", "micro_batch_size", "grad_accum", "epochs", "log_every", "lora_rank")
    for name in positive:
        if getattr(cfg, name) < 1:
            raise TrainError(f"{name} must be at least 1; got {getattr(cfg, name)}")
    for name in ("max_steps", "warmup_steps", "save_every"):
        if getattr(cfg, name) < 0:
            raise TrainError(f"{name} must not be negative; got {getattr(cfg, name)}")
    if not 0 <= cfg.epsilon_low < 1 or cfg.epsilon_high < 0:
        raise TrainError("epsilon_low must be in [0, 1) and epsilon_high >= 0")
    if cfg.is_cap < 1:
        raise TrainError(f"is_cap must be at least 1; got {cfg.is_cap}")
    if not 0 <= cfg.baseline_momentum < 1:
        raise TrainError(f"baseline_momentum must be in [0, 1); got {cfg.baseline_momentum}")
    if cfg.groups_per_step < 1 or cfg.max_staleness < 0 or cfg.poll <= 0 or cfg.max_wait < 0:
        raise TrainError("groups_per_step must be at least 1, max_staleness and max_wait not negative, poll positive")
    if cfg.lr <= 0 or cfg.kl_coef < 0 or cfg.max_grad_norm < 0 or cfg.weight_decay < 0:
        raise TrainError("lr must be positive; kl_coef, max_grad_norm and weight_decay must not be negative")


def config_to_toml(cfg: TrainConfig, section: str = "train") -> str:
    import tomli_w

    return tomli_w.dumps({section: dataclasses.asdict(cfg)})


def write_config(cfg: TrainConfig, path: Path) -> None:
    """Write the resolved configuration (atomically) so the run can be replayed with `--config`."""
    atomic_write_text(Path(path), config_to_toml(cfg))
