"""What a run leaves on disk: the Hugging Face checkpoint, the resumable state, the carried baselines.

OUT/config.json, model.safetensors, generation_config.json, tokenizer files   <- `vllm serve OUT`
  (with --lora: adapter_config.json, adapter_model.safetensors, tokenizer files  <- `ssrkit serve --refresh`)
OUT/baselines.json         per-role moving baselines (read back when OUT is the next round's --model)
OUT/train_config.toml      the resolved configuration
OUT/metrics.jsonl          one JSON object per optimizer step
OUT/data_summary.json      rollouts, groups and rows the run trained on
OUT/trainer_state.json     step reached, baselines used, done flag
OUT/state/                 Accelerate state (model, optimizer, RNG) for --resume, removed when done
OUT/policy.json            the policy version (`store.policy`), written last
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

from ssrkit.store.fsutil import atomic_write_json
from ssrkit.store.hf_checkpoint import CONFIG as HF_CONFIG
from ssrkit.store.artifact import now_iso
from ssrkit.store.hf_checkpoint import TRAIN_CONFIG, TRAINER_STATE, adapter_base, declared_dtype
from ssrkit.store.policy import child_version, read_version, write_version

BASELINES_FILE = "baselines.json"
TRAINER_STATE_FILE = TRAINER_STATE
CONFIG_FILE = TRAIN_CONFIG
METRICS_FILE = "metrics.jsonl"
DATA_SUMMARY_FILE = "data_summary.json"
STATE_DIR = "state"

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def write_json(path: Path, data: Any) -> None:
    """Atomic JSON write, keys sorted (`store.fsutil`)."""
    atomic_write_json(path, data, sort_keys=True)


def read_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def read_baselines(model_dir: str | Path) -> dict[str, float]:
    data = read_json(Path(model_dir) / BASELINES_FILE)
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float))}


def read_trainer_state(out: Path) -> dict[str, Any] | None:
    data = read_json(out / TRAINER_STATE_FILE)
    return data if isinstance(data, dict) else None


def checkpoint_dtype(model_dir: str | Path, requested: str) -> torch.dtype:
    """The dtype to save in: `requested`, or with "auto" the dtype the input checkpoint declares (else float32)."""
    if requested != "auto":
        return _DTYPES[requested]
    base = adapter_base(model_dir)
    return _DTYPES.get(declared_dtype(base or model_dir) or "float32", torch.float32)


def save_hf_checkpoint(accelerator: Any, model: Any, tokenizer: Any, out: Path, dtype: torch.dtype) -> None:
    """Gather the full weights (works under DDP, FSDP and ZeRO-3) and write a safetensors checkpoint on rank 0."""
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        for alias in tied_aliases(unwrapped):
            state_dict.pop(alias, None)
        state_dict = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state_dict.items()}
        unwrapped.config.use_cache = True  # turned off for training; generation wants it
        unwrapped.save_pretrained(out, state_dict=state_dict)  # a LoRA adapter (peft) keeps only its own weights
        tokenizer.save_pretrained(out)
    if accelerator.is_main_process and not hasattr(unwrapped, "peft_config"):
        # save_pretrained records the dtype of the in-memory (training) weights; record the saved one
        config = read_json(out / HF_CONFIG) or {}
        name = str(dtype).replace("torch.", "")
        config["dtype" if "dtype" in config or "torch_dtype" not in config else "torch_dtype"] = name
        write_json(out / HF_CONFIG, config)
    accelerator.wait_for_everyone()


def tied_aliases(model: Any) -> list[str]:
    """Names of parameters that are the same object as an earlier one (tied embeddings: `lm_head.weight`).
    Under DDP the state dict shares their storage and save_pretrained drops them; gathered from FSDP shards they
    come back as separate copies and would be written twice."""
    seen: set[int] = set()
    aliases = []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            aliases.append(name)
        seen.add(id(param))
    return aliases


def save_state(accelerator: Any, out: Path, trainer_state: dict[str, Any]) -> None:
    accelerator.save_state(str(out / STATE_DIR))
    if accelerator.is_main_process:
        write_json(out / TRAINER_STATE_FILE, trainer_state)
    accelerator.wait_for_everyone()


def remove_state(accelerator: Any, out: Path) -> None:
    if accelerator.is_main_process and (out / STATE_DIR).exists():
        shutil.rmtree(out / STATE_DIR)
    accelerator.wait_for_everyone()


def finish(accelerator: Any, out: Path, model: str, steps: int, baselines: dict[str, float],
           trainer_state: dict[str, Any], keep_state: bool) -> None:
    """The files a finished run adds beside its weights; policy.json last (`store.policy`: the version is the
    parent's step + `steps`, so lock-step rounds and `train --follow` share one version sequence)."""
    if accelerator.is_main_process:
        write_json(out / BASELINES_FILE, baselines)
        write_json(out / TRAINER_STATE_FILE, trainer_state)
    if keep_state:
        save_state(accelerator, out, trainer_state)
    else:
        remove_state(accelerator, out)
    if accelerator.is_main_process:
        write_version(out, child_version(read_version(model), steps), created=now_iso())
    accelerator.wait_for_everyone()
