"""The nccl strategy: push a full checkpoint's weights into the running server over vLLM's native weight transfer;
the data plane (`WeightTransport`) is swappable, and vLLM and CUDA are needed only when it is first used. Like the
other strategies it acts on a `serving.server.PolicyServer`, named in annotations without an import."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Protocol

from .config import ServeConfig, ServeError
from .process import _http


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
