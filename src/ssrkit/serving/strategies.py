"""How a running server moves to a new checkpoint: the interface and the restart and lora strategies (nccl has
its own module); `STRATEGIES` names them all. A strategy acts on a `serving.server.PolicyServer`, which imports
this module, so the annotations name it without importing it."""

from __future__ import annotations

from typing import Protocol

from ..store.policy import alias
from .config import ServeConfig, ServeError
from .launch import policy_of
from .nccl import NCCLStrategy
from .process import _http


class RefreshStrategy(Protocol):
    """How a running server moves to a new checkpoint."""

    def prepare(self, config: ServeConfig) -> None:
        """Adjust the launch (flags, environment) before the first start."""

    def refresh(self, server: "PolicyServer", checkpoint: str) -> None:
        """Make `server` serve `checkpoint`; on return it answers requests for `server.model`."""


class RestartStrategy:
    """Stop the server and start it again on the new checkpoint (works for any full-weight checkpoint)."""

    def prepare(self, config: ServeConfig) -> None:
        pass

    def refresh(self, server: "PolicyServer", checkpoint: str) -> None:
        server.stop()
        server.start(checkpoint)


class LoRAStrategy:
    """Hot-swap a LoRA adapter into the running server (the base checkpoint stays loaded). A versioned adapter is
    named by its alias (`store.policy`), others `PREFIX-N`; the newest `keep` adapters stay loaded."""

    def __init__(self, name_prefix: str = "policy", loaded: list[str] | None = None, keep: int = 1):
        self.name_prefix = name_prefix
        self.loaded: list[str] = list(loaded or [])  # adapters the server holds (a reattached server's, too)
        self.keep = max(1, keep)

    def next_name(self) -> str:
        """`PREFIX-N`, N one past the newest loaded adapter: vLLM refuses a name that is already loaded."""
        numbers = [int(n.rsplit("-", 1)[1]) for n in self.loaded
                   if n.startswith(self.name_prefix + "-") and n.rsplit("-", 1)[-1].isdigit()]
        return f"{self.name_prefix}-{max(numbers, default=0) + 1}"

    def name_for(self, checkpoint: str) -> str:
        version = policy_of(checkpoint)
        name = alias(version) if version is not None else self.next_name()
        return self.next_name() if name in self.loaded else name

    def prepare(self, config: ServeConfig) -> None:
        if "--enable-lora" not in config.args:
            config.args = [*config.args, "--enable-lora"]
        config.env = {**config.env, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}

    def refresh(self, server: "PolicyServer", checkpoint: str) -> None:
        name = self.name_for(checkpoint)
        status, text = _http(
            "POST",
            f"{server.url}/v1/load_lora_adapter",
            {"lora_name": name, "lora_path": str(checkpoint)},
            timeout=server.config.ready_timeout,
        )
        if status != 200:
            raise ServeError(f"loading LoRA adapter {checkpoint} failed ({status}): {text.strip()[:300]}")
        self.loaded.append(name)
        for old in self.loaded[: -self.keep]:  # keep GPU memory flat: only the newest `keep` adapters stay
            _http("POST", f"{server.url}/v1/unload_lora_adapter", {"lora_name": old})
        self.loaded = self.loaded[-self.keep:]
        server.model = name
        server.checkpoint = str(checkpoint)
        server.policy = policy_of(checkpoint)


STRATEGIES = {"restart": RestartStrategy, "lora": LoRAStrategy, "nccl": NCCLStrategy}


def check_strategy(name: str) -> None:
    if name not in STRATEGIES:
        raise ServeError(f"unknown refresh strategy {name!r}: use one of {', '.join(STRATEGIES)}")
