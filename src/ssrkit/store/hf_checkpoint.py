"""What ssrkit reads from a Hugging Face checkpoint directory without loading it (no torch, no transformers).

`ssrkit train` writes checkpoints (`train/checkpoint.py`) and `ssrkit serve` starts vLLM on them; both need the
same two facts: the dtype the checkpoint declares, and whether it is a LoRA adapter (and on which base). The report
needs a third: whether a training run finished its checkpoint (`trainer_state.json` says done), and which
checkpoint it started from (`train_config.toml`).
"""

from __future__ import annotations

from pathlib import Path

from .fsutil import read_json

CONFIG = "config.json"
ADAPTER_CONFIG = "adapter_config.json"
TRAINER_STATE = "trainer_state.json"  # written by `ssrkit train` next to the checkpoint
#: the configuration `ssrkit train` resolved, next to the checkpoint (its `model` names the one it started from)
TRAIN_CONFIG = "train_config.toml"
DTYPES = ("float32", "bfloat16", "float16")


def declared_dtype(checkpoint: str | Path) -> str | None:
    """The dtype the checkpoint's config.json declares (`dtype`, or the older `torch_dtype`), if vLLM knows it."""
    try:
        config = read_json(Path(checkpoint) / CONFIG)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    value = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    return value if value in DTYPES else None


def adapter_base(model_dir: str | Path) -> str | None:
    """The base checkpoint of a LoRA adapter directory (adapter_config.json), None for a full checkpoint."""
    try:
        config = read_json(Path(model_dir) / ADAPTER_CONFIG)
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    return str(base) if base else None


def finished_training(out: str | Path) -> bool:
    """Whether `out` holds a checkpoint that `ssrkit train` finished: trainer_state.json done, and full weights
    (config.json) or a LoRA adapter (adapter_config.json)."""
    try:
        state = read_json(Path(out) / TRAINER_STATE)
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    done = isinstance(state, dict) and bool(state.get("done"))
    return done and ((Path(out) / CONFIG).is_file() or (Path(out) / ADAPTER_CONFIG).is_file())
