"""`TrainConfig`: every knob of `ssrkit train`, resolved from defaults < `[train]` in ssrkit.toml < flags.

No torch here: the CLI resolves and validates the configuration before the heavy imports.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssrkit.store.fsutil import atomic_write_text
from ssrkit.store.trajectory import DROP_STATUSES, LIMIT_STATUSES
from ssrkit.train.errors import TrainError

if TYPE_CHECKING:
    from ssrkit.store.config import Config

ROLES = ("solver", "injector")


@dataclass
class TrainConfig:
    # run: what to train, where to write
    model: str = ""  # Hugging Face checkpoint directory (or any id from_pretrained accepts offline)
    out: str = ""  # output: HF checkpoint + metrics.jsonl + train_config.toml (+ state/ while running)
    resume: bool = False  # continue from out/state/ after a stop
    roles: list[str] = field(default_factory=list)  # roles to train on (solver, injector, a rollout file's task names); empty: all

    # training rows: what a rollout becomes
    max_length: int = 32768  # tokens per training row; longer rows are cut (the head is kept)

    # advantages (SPEC §9)
    std_scaling: bool = False  # divide by the group's std (GRPO-original); off by default (Dr. GRPO)
    leave_one_out: bool = False  # baseline = mean of the other group members
    drop_zero_variance: bool = True  # groups whose rewards are all equal teach nothing
    singleton: str = "baseline"  # a group of one: "baseline" (per-role moving baseline) or "drop"
    baseline_momentum: float = 0.9  # EMA weight of the old per-role baseline across rounds
    mask_statuses: list[str] = field(default_factory=lambda: list(LIMIT_STATUSES))  # exit statuses whose tokens get no loss
    drop_statuses: list[str] = field(default_factory=lambda: list(DROP_STATUSES))  # exit statuses left out of group means too

    # loss
    epsilon_low: float = 0.2  # lower clip range of the PPO ratio
    epsilon_high: float = 0.28  # upper clip range (clip-higher)
    # PPO ratio against: "sampler" log-probs where stored (elsewhere the initial policy's when epochs > 1, else the
    # current ones), "initial" (the starting checkpoint's, one no-grad pass) or "current" (detached: ratio 1)
    old_logprobs: str = "sampler"
    is_correction: str = "truncate"  # sampler/trainer mismatch: "truncate", "mask" or "none"
    is_cap: float = 2.0  # importance weights are capped at C (truncate) or kept only within [1/C, C] (mask)
    kl_coef: float = 0.0  # KL to the frozen initial policy (k3 estimator); 0 loads no reference model

    # optimisation
    lr: float = 1e-6  # learning rate
    warmup_steps: int = 0  # linear warm-up, then constant
    weight_decay: float = 0.0  # AdamW weight decay
    adam_beta1: float = 0.9  # AdamW beta1
    adam_beta2: float = 0.999  # AdamW beta2
    adam_eps: float = 1e-8  # AdamW epsilon
    max_grad_norm: float = 1.0  # gradient clipping norm (0 disables clipping)
    micro_batch_size: int = 1  # rows per forward/backward per process
    grad_accum: int = 8  # micro-batches per optimizer step; global batch = micro_batch_size*grad_accum*processes
    epochs: int = 1  # passes over the rollouts
    max_steps: int = 0  # stop after this many steps (0 = as many as the epochs need)
    seed: int = 0  # shuffling and initialisation seed
    shuffle: bool = True  # shuffle the rows each epoch

    # hardware
    mixed_precision: str = "auto"  # auto (bf16 on GPU, else the launcher's/none), no, bf16, fp16
    gradient_checkpointing: str = "auto"  # auto (on with a GPU), on, off
    model_dtype: str = "float32"  # dtype the weights are trained in (master weights)
    save_dtype: str = "auto"  # dtype written to the checkpoint; auto = the input checkpoint's dtype
    attn_implementation: str = ""  # "" = transformers' default (sdpa)
    trust_remote_code: bool = False  # let transformers run the checkpoint's own model code

    # LoRA (peft): train a low-rank adapter instead of the full weights; OUT is then an adapter directory that
    # `ssrkit serve --strategy lora --refresh` loads. A --model that is an adapter directory continues it.
    lora: bool = False  # train a LoRA adapter; OUT is then an adapter directory
    lora_rank: int = 16  # adapter rank (vLLM's default --max-lora-rank is 16)
    lora_alpha: float = 32.0  # LoRA scaling alpha
    lora_target_modules: list[str] = field(  # modules to adapt: attention and MLP projections
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )

    # outputs
    save_every: int = 0  # steps between resumable states (0 = only at the end of an interrupted run)
    keep_state: bool = False  # keep out/state/ (optimizer etc.) after a finished run
    log_every: int = 1  # steps between metric lines

    # continuous training (`--follow RUN`): train on a run's GRPO groups as they complete, one step a batch
    follow: str = ""  # run directory to follow (then no ARTIFACTS; checkpoints go to RUN/follow/checkpoints)
    max_staleness: int = 8  # rollouts sampled more than this many optimizer steps ago get no loss (counted stale)
    unknown_staleness: str = "keep"  # rollouts whose sampling version is unknown: keep (train, warn) or drop
    groups_per_step: int = 8  # complete groups per optimizer step
    max_wait: float = 0.0  # seconds to wait for groups_per_step before stepping with fewer (0: always wait)
    poll: float = 5.0  # seconds between scans of the run directory
    refresh_pid_file: list[str] = field(default_factory=list)  # detached servers (ssrkit serve --detach --pid-file) moved to each new step
    keep_checkpoints: int = 0  # committed steps kept on disk (0: max_staleness + 2); the root is never removed
    exit_when_idle: float = 0.0  # stop after this many seconds without a complete group (0: never)

    @classmethod
    def from_config(cls, cfg: "Config", **flags: Any) -> "TrainConfig":
        """`[train]` of the resolved configuration, then `flags` (None = not given), coerced and checked."""
        return _from_config(cfg, **flags)


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


def config_fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(TrainConfig)}


@dataclass(frozen=True)
class FieldDoc:
    panel: str  # the section comment above it: "Advantages", "Loss", ...
    help: str  # its own comment


def field_docs() -> dict[str, FieldDoc]:
    """Each `TrainConfig` field's section and meaning, read from the comments in the class body above.

    The comments are the documentation (`ssrkit train --help` is made from them), so a new field documents
    itself where it is declared. A comment after a blank line starts a section; a comment on the field's line,
    or the lines right above it, says what the field means.
    """
    import inspect
    import re

    docs: dict[str, FieldDoc] = {}
    panel, pending, blank = "", [], True
    lines = inspect.getsource(TrainConfig).splitlines()
    for line in lines[next(i for i, t in enumerate(lines) if t.startswith("class ")) + 1:]:
        text = line.strip()
        m = re.match(r"(\w+): [^=]+=(?:[^#]*)(?:#\s*(.*))?$", text)
        if not text:
            blank = True
        elif text.startswith("#"):
            if blank:  # a section header: its first words name the panel
                head = re.split(r"[:(]", text.lstrip("# "), maxsplit=1)[0].strip()
                panel = head[:1].upper() + head[1:]

                pending = []
            else:
                pending.append(text.lstrip("# "))
            blank = False
        elif m:
            docs[m.group(1)] = FieldDoc(panel, (m.group(2) or " ".join(pending)).strip())
            pending, blank = [], False
        else:
            blank = False
    return docs


def _coerce(name: str, value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise TrainError(f"[train] {name} must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TrainError(f"[train] {name} must be an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TrainError(f"[train] {name} must be a number, got {value!r}")
        return float(value)
    if isinstance(default, list):
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TrainError(f"[train] {name} must be a list of strings, got {value!r}")
        return list(value)
    if not isinstance(value, str):
        raise TrainError(f"[train] {name} must be a string, got {value!r}")
    return value


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


def _from_config(cfg: "Config", **flags: Any) -> TrainConfig:
    """`[train]` of `cfg`, then `flags` (None = not given), coerced and checked."""
    fields = config_fields()
    values: dict[str, Any] = {}
    table = cfg.data.get("train", {})
    if not isinstance(table, dict):
        raise TrainError(f"{', '.join(cfg.sources)}: [train] must be a table")
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in fields:
            raise TrainError(f"{cfg.sources[-1]}: unknown key in [train]: {key}")
        values[name] = value
    for name, value in flags.items():

        if value is None:
            continue
        if name not in fields:
            raise TrainError(f"unknown training option: {name}")
        values[name] = value
    defaults = TrainConfig()
    coerced = {name: _coerce(name, value, getattr(defaults, name)) for name, value in values.items()}
    cfg = TrainConfig(**coerced)
    validate_config(cfg)
    return cfg


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
