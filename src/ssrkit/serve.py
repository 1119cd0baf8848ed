"""Serve a policy checkpoint with vLLM's OpenAI-compatible server, and move it to a newer checkpoint.

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
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Protocol

from .errors import SsrkitError
from .store.fsutil import atomic_write_json, atomic_write_text
from .store.hf_checkpoint import declared_dtype
from .store.policy import PolicyError, PolicyVersion, alias, read_version


class ServeError(SsrkitError):
    """A user-facing serving error: vLLM missing, port taken, server died or not ready in time."""


@dataclass
class ServeConfig:
    command: list[str] = field(default_factory=lambda: ["vllm", "serve"])  # the checkpoint is appended
    host: str = "127.0.0.1"
    port: int = 8000
    args: list[str] = field(default_factory=list)  # e.g. ["--max-model-len", "32768", "--tensor-parallel-size", "2"]
    served_model_name: str | None = None  # a stable name for clients; default: vLLM's (the checkpoint path)
    strategy: str = "restart"  # "restart" | "lora" | "nccl"
    ready_timeout: float = 900.0
    stop_timeout: float = 30.0
    poll_interval: float = 0.5
    log_file: Path | None = None  # the server's stdout+stderr (appended); None = our stderr
    env: dict[str, str] = field(default_factory=dict)
    lora_keep: int = 1  # lora strategy: adapters kept loaded (2: a request begun on the previous one finishes)


def _http(method: str, url: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"} if data else {}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _group_alive(pgid: int) -> bool:
    """Whether any process of group `pgid` is still running (zombies, which nobody may reap, do not count)."""
    proc = Path("/proc")
    if proc.is_dir():
        for stat in proc.glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":  # fields after "(comm)": state ppid pgrp ...
                return True
        return False
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_group(pgid: int, stop_timeout: float = 30.0, process: subprocess.Popen | None = None) -> None:
    """SIGTERM the process group `pgid`, then SIGKILL whatever is left after `stop_timeout` seconds.

    `process` (the group leader, when it is our child) is reaped on the way, so it does not linger as a zombie.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + stop_timeout
    while time.monotonic() < deadline:
        if process is not None:
            process.poll()
        if not _group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if process is not None:
        process.wait()


def _stderr_fd() -> int | None:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return None  # a replaced stderr (e.g. under pytest): inherit


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


class WeightTransport(Protocol):
    """The data plane of the nccl strategy: how tensors travel from this process into the server's workers.

    The HTTP control plane (NCCLStrategy) is the same whatever carries the bytes, so the carrier is swappable:
    VLLMNCCLTransport is the real one (CUDA + vLLM); tests use a gloo stand-in on the CPU.
    """

    device: str  # where the tensors must be when they are sent
    packed: bool  # sent as vLLM's packed buffers (the server is told, so it unpacks the same way)

    def init(self, master_address: str, master_port: int, world_size: int) -> Any:
        """Form the transfer group as rank 0, the servers' workers being the other ranks; return the group."""

    def send(self, group: Any, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Broadcast each tensor, in order, from rank 0 to the group."""


_NCCL_HINT = (
    "the nccl strategy pushes weights from a CUDA GPU with vLLM installed on this machine; "
    "use --strategy restart otherwise"
)


class VLLMNCCLTransport:
    """vLLM's own NCCL weight-transfer engine, pushing from a CUDA GPU of this machine.

    NCCL needs the pusher on a GPU that none of the server's workers uses: pick it with `device` ("cuda:1") or
    CUDA_VISIBLE_DEVICES. vLLM is imported here, not at module import, so ssrkit works without it.
    """

    packed = True

    def __init__(self, device: str = "cuda"):
        try:
            import torch
            from vllm.distributed.weight_transfer.nccl_engine import (
                NCCLTrainerSendWeightsArgs,
                NCCLWeightTransferEngine,
            )
        except ImportError as exc:
            raise ServeError(f"cannot import vLLM's weight transfer ({exc}): {_NCCL_HINT}") from None
        if not torch.cuda.is_available():
            raise ServeError(f"no CUDA device here: {_NCCL_HINT}")
        self.device = device
        self._torch = torch
        self._engine = NCCLWeightTransferEngine
        self._send_args = NCCLTrainerSendWeightsArgs

    def init(self, master_address: str, master_port: int, world_size: int) -> Any:
        with self._torch.cuda.device(self._torch.device(self.device)):  # vLLM uses the current device
            return self._engine.trainer_init(
                {"master_address": master_address, "master_port": master_port, "world_size": world_size}
            )

    def send(self, group: Any, named_tensors: Iterable[tuple[str, Any]]) -> None:
        with self._torch.cuda.device(self._torch.device(self.device)):
            self._engine.trainer_send_weights(
                iterator=iter(named_tensors), trainer_args=self._send_args(group=group, packed=self.packed)
            )


class NCCLStrategy:
    """Push a full checkpoint's weights into the running server over vLLM's native weight transfer (no restart).

    The server needs VLLM_SERVER_DEV_MODE=1 and `--weight-transfer-config '{"backend": "nccl"}'` (set by
    `prepare`). A refresh: form the transfer group once (GET /get_world_size, then POST
    /init_weight_transfer_engine while this process joins as rank 0), then POST /pause, /start_weight_update,
    /update_weights (while the transport broadcasts), /finish_weight_update, /resume. Names stay in checkpoint
    format (`is_checkpoint_format`), so vLLM maps them onto its own layout as when it loads a checkpoint.
    `master_address` is this machine as the server's workers reach it (127.0.0.1 unless they run elsewhere).
    """

    def __init__(
        self, transport: WeightTransport | None = None, master_address: str = "127.0.0.1", timeout: float = 600.0
    ):
        self._transport = transport
        self.master_address = master_address
        self.timeout = timeout
        self.group: Any = None

    @property
    def transport(self) -> WeightTransport:
        if self._transport is None:  # made on first use: starting a server needs neither vLLM nor CUDA here
            self._transport = VLLMNCCLTransport()
        return self._transport

    def prepare(self, config: ServeConfig) -> None:
        if not any(a.split("=", 1)[0] == "--weight-transfer-config" for a in config.args):
            config.args = [*config.args, "--weight-transfer-config", json.dumps({"backend": "nccl"})]
        config.env = {**config.env, "VLLM_SERVER_DEV_MODE": "1"}

    def refresh(self, server: "PolicyServer", checkpoint: str) -> None:
        transport = self.transport
        tensors = _load_safetensors(checkpoint)
        if self.group is None:
            self.group = self._init_group(server, transport)
        update_info = {
            "names": [name for name, _ in tensors],
            "dtype_names": [str(t.dtype).split(".")[-1] for _, t in tensors],
            "shapes": [list(t.shape) for _, t in tensors],
            "packed": transport.packed,
        }
        on_device = ((name, t.to(transport.device)) for name, t in tensors)  # one tensor at a time
        self._call(server, "POST", "/pause")
        try:
            self._call(server, "POST", "/start_weight_update", {"is_checkpoint_format": True})
            self._while(
                server, "/update_weights", {"update_info": update_info}, lambda: transport.send(self.group, on_device)
            )
            self._call(server, "POST", "/finish_weight_update", {})
        except BaseException as exc:
            try:  # leave the server answering requests (with whatever weights it has) rather than paused
                self._call(server, "POST", "/resume")
            except ServeError as resume_exc:
                if isinstance(exc, ServeError):
                    raise ServeError(f"{exc}; resuming failed too: {resume_exc}") from None
            raise
        self._call(server, "POST", "/resume")
        server.checkpoint = str(checkpoint)

    def _init_group(self, server: "PolicyServer", transport: WeightTransport) -> Any:
        workers = json.loads(self._call(server, "GET", "/get_world_size"))["world_size"]
        world_size = workers + 1  # this process is rank 0, the workers follow from rank_offset 1
        port = _free_port(self.master_address)
        init_info = {"master_address": self.master_address, "master_port": port, "rank_offset": 1,
                     "world_size": world_size}
        return self._while(
            server,
            "/init_weight_transfer_engine",
            {"init_info": init_info},
            lambda: transport.init(self.master_address, port, world_size),
        )

    def _call(self, server: "PolicyServer", method: str, path: str, body: dict[str, Any] | None = None) -> str:
        try:
            status, text = _http(method, f"{server.url}{path}", body, timeout=self.timeout)
        except OSError as exc:
            raise ServeError(f"nccl refresh: {method} {path} failed: {exc}") from None
        if status != 200:
            raise ServeError(_nccl_http_error(method, path, status, text))
        return text

    def _while(self, server: "PolicyServer", path: str, body: dict[str, Any], work: Callable[[], Any]) -> Any:
        """POST `path` and run `work` here at the same time: each blocks until the other side has joined.

        Both run in threads and the first failure ends the wait, so a server that refuses at once (404, 500)
        does not leave this process waiting for a rendezvous that will never come. After a failure the group
        is dropped (the next refresh forms a new one): a half-done broadcast leaves it in an unknown state.
        """
        done: dict[str, tuple[bool, Any]] = {}

        def run(key: str, fn: Callable[[], Any]) -> None:
            try:
                done[key] = (True, fn())
            except BaseException as exc:  # reported by the waiting thread
                done[key] = (False, exc)

        def post() -> str:
            return self._call(server, "POST", path, body)

        for key, fn in (("http", post), ("work", work)):
            threading.Thread(target=run, args=(key, fn), daemon=True, name=f"nccl-{key}").start()
        deadline = time.monotonic() + self.timeout
        while len(done) < 2 and not any(not ok for ok, _ in done.values()) and time.monotonic() < deadline:
            time.sleep(0.01)
        if len(done) < 2 or any(not ok for ok, _ in done.values()):
            self.group = None
        for key in ("http", "work"):  # the server's answer says most; a transport error comes next
            ok, value = done.get(key, (True, None))
            if not ok and isinstance(value, ServeError):
                raise value
            if not ok:
                raise ServeError(f"nccl refresh: the transport failed during POST {path}: {value}") from value
        if len(done) < 2:
            raise ServeError(f"nccl refresh: POST {path} not done after {self.timeout:.0f} s")
        return done["work"][1]


def _nccl_http_error(method: str, path: str, status: int, text: str) -> str:
    message = f"nccl refresh: {method} {path} answered {status}: {text.strip()[:300]}"
    if status == 404:
        message += (
            " (the server was not started with the nccl strategy, i.e. VLLM_SERVER_DEV_MODE=1 and "
            "--weight-transfer-config, or its vLLM version lacks native weight transfer)"
        )
    return message


def _load_safetensors(checkpoint: str | Path) -> list[tuple[str, Any]]:
    """Every tensor of the checkpoint's *.safetensors files, on the CPU, by its checkpoint name."""
    files = sorted(Path(checkpoint).glob("*.safetensors"))
    if not files:
        raise ServeError(f"no *.safetensors files in {checkpoint}: the nccl strategy pushes full weights")
    from safetensors.torch import load_file

    return [item for f in files for item in load_file(f).items()]


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


STRATEGIES = {"restart": RestartStrategy, "lora": LoRAStrategy, "nccl": NCCLStrategy}

#: vLLM's OpenAI-compatible server as a module (`python -m ...`): what runs where the `vllm` script does not
MODULE_ENTRY = "vllm.entrypoints.openai.api_server"
_WORKING_SCRIPTS: dict[str, bool] = {}


def resolve_launcher(command: list[str]) -> list[str]:
    """The server command to run: `command` itself, except that `vllm serve` whose `vllm` script is broken (it
    cannot even print its version) becomes `PYTHON -m vllm.entrypoints.openai.api_server` with the Python the
    script was installed for."""
    if len(command) != 2 or Path(command[0]).name != "vllm" or command[1] != "serve":
        return list(command)
    script = shutil.which(command[0])
    if script is None:
        return list(command)  # start() says it is missing
    if script not in _WORKING_SCRIPTS:
        try:
            probe = subprocess.run([script, "--version"], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
            _WORKING_SCRIPTS[script] = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _WORKING_SCRIPTS[script] = False
    if _WORKING_SCRIPTS[script]:
        return list(command)
    return [_script_python(Path(script)), "-m", MODULE_ENTRY]


def _script_python(script: Path) -> str:
    """The interpreter of a console script (its `#!` line), else the one next to it, else ours."""
    try:
        first = script.read_bytes()[:256].split(b"\n", 1)[0].decode()
    except (OSError, UnicodeDecodeError):
        first = ""
    if first.startswith("#!") and Path(first[2:].strip().split()[0]).is_file():
        return first[2:].strip().split()[0]
    sibling = script.with_name("python")
    return str(sibling) if sibling.is_file() else sys.executable


def faithful_logprob_args(checkpoint: str | Path, user_args: list[str]) -> list[str]:
    """Flags that make the server's log-probs the trainer's, for those `user_args` do not set already."""
    given = {a.split("=", 1)[0] for a in user_args}
    out = []
    if "--logprobs-mode" not in given:
        out += ["--logprobs-mode", "processed_logprobs"]
    dtype = declared_dtype(checkpoint)
    if "--dtype" not in given and dtype:
        out += ["--dtype", dtype]
    return out


def policy_of(checkpoint: str | Path) -> PolicyVersion | None:
    """The checkpoint's policy version, None when it has none (or an unreadable one: served, not versioned)."""
    try:
        return read_version(checkpoint)
    except PolicyError:
        return None


def check_strategy(name: str) -> None:
    if name not in STRATEGIES:
        raise ServeError(f"unknown refresh strategy {name!r}: use one of {', '.join(STRATEGIES)}")


class PolicyServer:
    """One `vllm serve` process group: started here (`start`) or started earlier and found again (`attach`)."""

    def __init__(self, config: ServeConfig | None = None, strategy: RefreshStrategy | None = None):
        self.config = config or ServeConfig()
        if strategy is None:
            check_strategy(self.config.strategy)
            strategy = LoRAStrategy(keep=self.config.lora_keep) if self.config.strategy == "lora" \
                else STRATEGIES[self.config.strategy]()
        self.strategy = strategy
        self.strategy.prepare(self.config)
        self.process: subprocess.Popen | None = None  # set when we started it
        self.pid: int | None = None  # its process-group id, ours or attached
        self.checkpoint: str | None = None
        self.model: str | None = None  # the name clients send as `model`
        self.policy: PolicyVersion | None = None  # the version it serves, when known (see served_names)
        self._log: IO[bytes] | None = None

    @classmethod
    def attach(
        cls,
        config: ServeConfig,
        pid: int,
        checkpoint: str,
        model: str | None = None,
        strategy: RefreshStrategy | None = None,
    ) -> "PolicyServer":
        """The server already running as process group `pid` (e.g. from `ssrkit serve --detach`), started with
        `config` on `checkpoint`: refresh and stop work on it as on one started here; nothing is started."""
        server = cls(config, strategy)
        server.pid = pid
        server.checkpoint = str(checkpoint)
        server.model = model or config.served_model_name or str(checkpoint)
        return server

    def running(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        return self.pid is not None and _group_alive(self.pid)

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.config.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def command(self, checkpoint: str) -> list[str]:
        launcher = resolve_launcher(self.config.command)
        if launcher[-1] == MODULE_ENTRY:  # the module entry point ignores a positional checkpoint
            cmd = [*launcher, "--model", str(checkpoint)]
        else:
            cmd = [*launcher, str(checkpoint)]
        cmd += ["--host", self.config.host, "--port", str(self.config.port)]
        names = self.served_names(checkpoint)
        if names:
            cmd += ["--served-model-name", *names]
        return cmd + faithful_logprob_args(checkpoint, self.config.args) + list(self.config.args)

    def served_names(self, checkpoint: str) -> list[str]:
        """`--served-model-name` values: the name clients use first (responses say it; LoRA adapters hang off
        it), then the alias of the checkpoint's version, unless the user names the model in `args` or the
        strategy is nccl (an in-place update would make the alias lie)."""
        version = policy_of(checkpoint)
        user_named = any(a.split("=", 1)[0] == "--served-model-name" for a in self.config.args)
        if version is None or user_named or self.config.strategy == "nccl":
            return [self.config.served_model_name] if self.config.served_model_name else []
        return [self.config.served_model_name or str(checkpoint), alias(version)]

    def start(self, checkpoint: str | Path, wait: bool = True) -> None:
        if self.running():
            raise ServeError(f"server already running (pid {self.pid})")
        if shutil.which(self.config.command[0]) is None:
            hint = " (pip install 'ssrkit[vllm]'; on a CPU see docs/train.md)" \
                if Path(self.config.command[0]).name == "vllm" else ""
            raise ServeError(f"command not found: {self.config.command[0]}{hint}")
        if port_in_use(self.config.host, self.config.port):
            raise ServeError(f"port {self.config.port} on {self.config.host} is already in use")
        cmd = self.command(str(checkpoint))
        if self.config.log_file is not None:
            Path(self.config.log_file).parent.mkdir(parents=True, exist_ok=True)
            self._log = open(self.config.log_file, "ab")
        self.process = subprocess.Popen(
            cmd,
            env={**os.environ, **self.config.env},
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=self._log if self._log else _stderr_fd(),  # our stdout stays free for results (--json)
            stderr=subprocess.STDOUT,
        )
        self.pid = self.process.pid
        self.checkpoint = str(checkpoint)
        self.model = self.config.served_model_name or str(checkpoint)
        self.policy = policy_of(checkpoint) if len(self.served_names(str(checkpoint))) > 1 else None
        if wait:
            try:
                self.wait_ready()
            except BaseException:
                self.stop()
                raise

    def models(self) -> list[str]:
        status, text = _http("GET", f"{self.base_url}/models")
        if status != 200:
            raise ServeError(f"GET /v1/models answered {status}")
        return [m.get("id", "") for m in json.loads(text).get("data", [])]

    def ready(self) -> bool:
        try:
            status, _ = _http("GET", f"{self.url}/health", timeout=2.0)
            if status != 200 or not self.models():
                return False
        except (OSError, ServeError, ValueError):
            return False
        return self.generates()

    def generates(self) -> bool:
        """One one-token completion comes back (vLLM answers /health before its engine has run a request)."""
        body = {"model": self.model, "prompt": "ping", "max_tokens": 1, "temperature": 0}
        try:
            status, text = _http("POST", f"{self.base_url}/completions", body, timeout=60.0)
            return status == 200 and bool(json.loads(text).get("choices"))
        except (OSError, ValueError):
            return False

    def wait_ready(self, timeout: float | None = None) -> None:
        timeout = self.config.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            if self.process is not None and self.process.poll() is not None:
                raise ServeError(
                    f"server exited with code {self.process.returncode} before it was ready"
                    f"{self._log_hint()}: {shlex.join(self.command(self.checkpoint or ''))}"
                )
            if self.ready():
                return
            if time.monotonic() >= deadline:
                raise ServeError(f"server not ready after {timeout:.0f} s at {self.url}{self._log_hint()}")
            time.sleep(self.config.poll_interval)

    def _log_hint(self) -> str:
        if self.config.log_file is None:
            return ""
        try:
            tail = Path(self.config.log_file).read_text(errors="replace").strip().splitlines()[-1:]
        except OSError:
            tail = []
        return f" (log: {self.config.log_file}{'; last line: ' + tail[0][:200] if tail else ''})"

    def refresh(self, checkpoint: str | Path) -> None:
        """Serve `checkpoint` from now on, by the configured strategy."""
        if not self.running():
            self.start(checkpoint)
            return
        self.strategy.refresh(self, str(checkpoint))

    def stop(self) -> None:
        if self.pid is not None:
            kill_group(self.pid, self.config.stop_timeout, self.process)
        self.process = None
        self.pid = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> "PolicyServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- a detached server, found again through its pid file -------------------------------------------------------
#
# `ssrkit serve --detach` writes the process-group id to PID_FILE (what scripts read) and the server's settings to
# PID_FILE.json, so that a later `--refresh` can rebuild the PolicyServer (by `attach`) and move it by its strategy.


def sidecar_path(pid_file: Path) -> Path:
    return pid_file.with_name(pid_file.name + ".json")


def start_time(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, field 22 of /proc/PID/stat); None when there is no
    such process (or no /proc). A pid is reused once its process is gone; the pair (pid, start time) never."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _check_recorded(pid_file: Path, pgid: int, started: str | None) -> None:
    """ServeError unless process group `pgid` is still the server `pid_file` recorded: its leader, when there
    is one, started when the record says (after a reboot or a crash the number may name another program's
    group, which a stop would kill). A record without the time proves nothing."""
    now = start_time(pgid)
    if now is not None and now != started:
        pid_file.unlink(missing_ok=True)
        sidecar_path(pid_file).unlink(missing_ok=True)
        raise ServeError(f"process {pgid} is not the server recorded in {pid_file} (it started at another "
                         f"time: the number was reused, or the record predates ssrkit recording start times); "
                         f"nothing was stopped and the records were removed — stop your server yourself if it is "
                         f"still running (kill -- -{pgid} once you checked `ps -o pid,args -g {pgid}`)")


def _recorded_start(pid_file: Path) -> str | None:
    try:
        state = json.loads(sidecar_path(pid_file).read_text())
    except (OSError, ValueError):
        return None
    started = state.get("started") if isinstance(state, dict) else None
    return started if isinstance(started, str) else None


def record_detached(server: PolicyServer, pid_file: Path) -> None:
    """Write `server`'s process-group id to `pid_file` and its settings (and LoRA adapters) to the sidecar."""
    config = server.config
    state = {
        "pid": server.pid,
        "host": config.host,
        "port": config.port,
        "strategy": config.strategy,
        "served_model_name": config.served_model_name,
        "command": config.command,
        "args": config.args,
        "env": config.env,
        "log": str(config.log_file) if config.log_file is not None else None,
        "ready_timeout": config.ready_timeout,
        "checkpoint": server.checkpoint,
        "model": server.model,
        "started": start_time(server.pid) if server.pid is not None else None,
    }
    state["policy"] = server.policy.turn() if server.policy is not None else None
    if isinstance(server.strategy, LoRAStrategy):
        state["lora_adapters"] = server.strategy.loaded
        state["lora_keep"] = server.strategy.keep
    atomic_write_json(sidecar_path(pid_file), state)
    atomic_write_text(pid_file, f"{server.pid}\n")


def attach_detached(pid_file: Path) -> PolicyServer:
    """The running server recorded by `record_detached`, as a PolicyServer with its strategy's state restored."""
    sidecar = sidecar_path(pid_file)
    try:
        state = json.loads(sidecar.read_text())
    except OSError:
        raise ServeError(
            f"no server recorded in {pid_file} (start one with `ssrkit serve CHECKPOINT --detach --pid-file "
            f"{pid_file}`)"
        ) from None
    except ValueError as exc:
        raise ServeError(f"{sidecar} is not valid JSON ({exc}): stop the server and start it again") from None
    try:
        config = ServeConfig(
            command=list(state["command"]),
            host=state["host"],
            port=int(state["port"]),
            args=list(state["args"]),
            served_model_name=state["served_model_name"],
            strategy=state["strategy"],
            ready_timeout=float(state["ready_timeout"]),
            log_file=Path(state["log"]) if state["log"] else None,
            env=dict(state.get("env") or {}),
        )
        pid, checkpoint, model = int(state["pid"]), state["checkpoint"], state["model"]
    except (KeyError, TypeError, ValueError) as exc:
        raise ServeError(f"{sidecar} lacks a server setting ({exc!r}): stop the server and start it again") from None
    check_strategy(config.strategy)
    _check_recorded(pid_file, pid, state.get("started"))
    strategy = LoRAStrategy(loaded=state.get("lora_adapters"), keep=int(state.get("lora_keep") or 1)) \
        if config.strategy == "lora" else None
    server = PolicyServer.attach(config, pid, checkpoint, model, strategy)
    recorded = state.get("policy")
    if isinstance(recorded, dict) and isinstance(recorded.get("step"), int) and isinstance(recorded.get("id"), str):
        server.policy = PolicyVersion(recorded["step"], recorded["id"])
    if not server.running():
        raise ServeError(f"the server recorded in {pid_file} (process group {server.pid}) is not running")
    return server


def refresh_detached(pid_file: Path, checkpoint: str | Path, strategy: str | None = None) -> PolicyServer:
    """Move the detached server of `pid_file` to `checkpoint` by the strategy it was started with."""
    server = attach_detached(pid_file)
    if strategy is not None:
        check_strategy(strategy)
        if strategy != server.config.strategy:
            raise ServeError(
                f"the server in {pid_file} was started with strategy {server.config.strategy!r}, not {strategy!r}: "
                "stop it and start it again to change"
            )
    server.refresh(checkpoint)
    record_detached(server, pid_file)
    return server


def stop_detached(pid_file: Path, stop_timeout: float = 30.0) -> int:
    """Stop the server recorded in `pid_file`, remove its records, and return its process-group id."""
    try:
        pgid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        raise ServeError(f"no server recorded in {pid_file}") from None
    _check_recorded(pid_file, pgid, _recorded_start(pid_file))
    kill_group(pgid, stop_timeout)
    pid_file.unlink(missing_ok=True)
    sidecar_path(pid_file).unlink(missing_ok=True)
    return pgid
