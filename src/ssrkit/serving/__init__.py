"""
    server = PolicyServer(ServeConfig(port=8000, served_model_name="policy"))
    server.start("runs/r0/policy")      # `vllm serve runs/r0/policy --host 127.0.0.1 --port 8000 ...`
    ...                                 # agents talk to server.base_url, model server.model
    server.refresh("runs/r1/policy")    # strategy "restart": stop, start on the new checkpoint, wait ready
    server.stop()                       # the whole process group, SIGTERM then SIGKILL

The server runs in its own process group, so stopping it also ends the workers vLLM spawns. Readiness means
`GET /health` answers 200, `GET /v1/models` lists a model and a one-token completion comes back (an engine that
dies on its first request — a model the backend cannot run — is not ready).

The launch is made so that the sampler's log-probs are the trainer's: `--logprobs-mode processed_logprobs` (vLLM
returns raw, pre-temperature log-probs otherwise) and `--dtype` of the checkpoint's own config (vLLM on a CPU
downcasts float32 to bfloat16 otherwise), unless `args` already set them. `vllm serve` is used when the `vllm`
script works; where it does not (the community CPU build installs one that cannot find its own metadata), the
same Python runs vLLM's module entry point, which takes the checkpoint as `--model`. Refresh strategies share one interface (the flags
and environment each needs are set when it is chosen):

- `restart`: stop, start on the new checkpoint (any checkpoint, full weights; the slowest).
- `lora`: hot-swap a LoRA adapter directory through `/v1/load_lora_adapter` (`--enable-lora`,
  VLLM_ALLOW_RUNTIME_LORA_UPDATING=True).
- `nccl`: push a full checkpoint's *.safetensors into the running server with vLLM's native weight transfer
  (VLLM_SERVER_DEV_MODE=1, `--weight-transfer-config '{"backend": "nccl"}'`). This process sends, so it needs
  vLLM and a CUDA GPU the server's workers do not use; the data plane is a `WeightTransport`, which tests replace
  with a gloo stand-in on the CPU.

Policy versions (`store.policy`): a checkpoint with a policy.json is also served under its alias
(`ssrkit-policy-s000012-3f2a9c1e0b7d`, a second `--served-model-name`; LoRA adapters are named by it), so clients
read from `/v1/models` which version answers them. The nccl strategy updates weights in place, which a model name
cannot follow: it serves no alias, and clients record the version as unknown.

A server started elsewhere (`ssrkit serve --detach`) is found again with `PolicyServer.attach`, or through its
pid file with `attach_detached` / `refresh_detached` / `stop_detached`.

The package, split by job:

- `config`: `ServeConfig` (a server's settings) and `ServeError`;
- `process`: the server process from outside (HTTP, ports, its process group);
- `launch`: the command that starts vLLM on a checkpoint, and the checkpoint's policy version;
- `strategies`: how a running server moves to a new checkpoint (restart, lora; `STRATEGIES`), `nccl` the third;
- `server`: `PolicyServer`, one server's lifecycle;
- `detached`: a server started by `ssrkit serve --detach`, found again through its pid file;
- `replicas`: N servers of one checkpoint on one machine (ports, GPUs, pid files);
- `run`: what `ssrkit serve` does with the servers it starts (detached once ready, or watched until they exit).
"""

from .config import ServeConfig, ServeError
from .detached import (attach_detached, record_detached, refresh_detached, sidecar_path, start_time,
                       stop_detached)
from .launch import MODULE_ENTRY, faithful_logprob_args, policy_of, resolve_launcher
from .nccl import NCCLStrategy, VLLMNCCLTransport, WeightTransport
from .process import kill_group, port_in_use
from .server import PolicyServer
from .strategies import STRATEGIES, LoRAStrategy, RefreshStrategy, RestartStrategy, check_strategy

__all__ = ["MODULE_ENTRY", "STRATEGIES", "LoRAStrategy", "NCCLStrategy", "PolicyServer", "RefreshStrategy",
           "RestartStrategy", "ServeConfig", "ServeError", "VLLMNCCLTransport", "WeightTransport", "attach_detached",
           "check_strategy", "faithful_logprob_args", "kill_group", "policy_of", "port_in_use", "record_detached",
           "refresh_detached", "resolve_launcher", "sidecar_path", "start_time", "stop_detached"]
