"""A stand-in for `vllm serve CHECKPOINT --host H --port P [--served-model-name N] [--enable-lora]`: a real HTTP
server answering /health, /v1/models and /v1/load_lora_adapter, with a child process (like vLLM's workers) so
that tests can see the whole process group go. Environment: FAKE_VLLM_DELAY (seconds before listening),
FAKE_VLLM_FAIL (exit 3 at once), FAKE_VLLM_CHILD_PID (file to write the child's pid to), FAKE_VLLM_NO_GENERATE
(/v1/completions answers 500, as an engine that dies on its first request). `--version` prints a version.

With VLLM_SERVER_DEV_MODE=1 and `--weight-transfer-config '{"backend": "nccl"}'` (as vLLM, 404 otherwise) it also
answers vLLM's weight-transfer endpoints: /get_world_size (1 worker), /init_weight_transfer_engine, /pause,
/resume, /start_weight_update, /update_weights, /finish_weight_update, in vLLM's order (409 out of order). The
data plane is a gloo stand-in for NCCL: the worker joins a torch.distributed gloo group at the given master
address (rank = rank_offset) and receives each tensor by broadcast from rank 0, unpacked. Test-only
GET /fake/weights answers {"weights": {name: {sha256, dtype, shape}}, "paused", "calls"} about what it received.
torch is imported only when a group is formed, so the other tests do not pay for it.
"""

import datetime
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


class WeightReceiver:
    """The server side of vLLM's weight transfer, with gloo standing in for NCCL."""

    def __init__(self):
        self.lock = threading.Lock()
        self.group = None
        self.paused = False
        self.state = "idle"  # idle -> started -> updated -> idle
        self.weights = {}
        self.calls = []

    def init(self, info):
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=20)
        store = dist.TCPStore(info["master_address"], info["master_port"], info["world_size"], False,
                              timeout=timeout)
        self.group = dist.ProcessGroupGloo(store, info["rank_offset"], info["world_size"], timeout)
        self.store = store  # the group needs it for as long as it lives

    def receive(self, info):
        import torch
        import torch.distributed as dist

        if info.get("packed"):
            raise ValueError("the fake receives tensors one by one; packed broadcasts are not unpacked here")
        options = dist.BroadcastOptions()
        options.rootRank = 0
        for name, dtype, shape in zip(info["names"], info["dtype_names"], info["shapes"], strict=True):
            tensor = torch.empty(shape, dtype=getattr(torch, dtype))
            self.group.broadcast([tensor], options).wait()
            self.weights[name] = {"sha256": digest(tensor), "dtype": dtype, "shape": list(tensor.shape)}


def digest(tensor):
    """sha256 of a tensor's bytes (any dtype, bfloat16 included)."""
    import torch

    return hashlib.sha256(tensor.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def served_names(args):
    if "--served-model-name" not in args:
        return []
    rest = args[args.index("--served-model-name") + 1:]
    return [a for a in rest[: next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]]


def weight_transfer_enabled(args):
    config = json.loads(option(args, "--weight-transfer-config", "{}"))
    return os.environ.get("VLLM_SERVER_DEV_MODE") == "1" and config.get("backend") == "nccl"


def main():
    args = sys.argv[1:]
    if args == ["--version"]:
        print("0.0-fake")
        return
    assert args[0] == "serve", args
    checkpoint = args[1]
    port = int(option(args, "--port", "8000"))
    host = option(args, "--host", "127.0.0.1")
    names = served_names(args) or [checkpoint]  # vLLM's nargs="+": every name is listed, the first answers
    name = names[0]
    if os.environ.get("FAKE_VLLM_FAIL"):
        print("fake vllm: failing on purpose", flush=True)
        sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if os.environ.get("FAKE_VLLM_CHILD_PID"):
        with open(os.environ["FAKE_VLLM_CHILD_PID"], "w") as fh:
            fh.write(str(child.pid))
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))
    models = [{"id": n, "object": "model", "root": checkpoint, "parent": None} for n in names]
    lora_enabled = "--enable-lora" in args and os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING") == "True"
    receiver = WeightReceiver() if weight_transfer_enabled(args) else None

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, code, body):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, "")
            elif self.path == "/v1/models":
                self.reply(200, {"object": "list", "data": models})
            elif receiver is not None and self.path == "/get_world_size":
                receiver.calls.append(self.path)
                self.reply(200, {"world_size": 1})
            elif receiver is not None and self.path == "/fake/weights":
                self.reply(200, {"weights": receiver.weights, "paused": receiver.paused, "calls": receiver.calls})
            else:
                self.reply(404, {"error": "not found"})

        def weight_transfer(self, body):
            """One weight-transfer call; returns (status, body). Calls run one at a time, as vLLM's do."""
            receiver.calls.append(self.path)
            with receiver.lock:
                if self.path == "/pause":
                    receiver.paused = True
                elif self.path == "/resume":
                    receiver.paused = False
                elif self.path == "/init_weight_transfer_engine":
                    receiver.init(body["init_info"])
                elif receiver.group is None:
                    return 400, {"error": "weight transfer engine not initialized"}
                elif self.path == "/start_weight_update":
                    if receiver.state != "idle":
                        return 409, {"error": f"a weight update is already {receiver.state}"}
                    receiver.state = "started"
                elif self.path == "/update_weights":
                    if receiver.state == "idle":
                        return 409, {"error": "call /start_weight_update first"}
                    receiver.receive(body["update_info"])
                    receiver.state = "updated"
                elif self.path == "/finish_weight_update":
                    if receiver.state != "updated":
                        return 409, {"error": "no weights received since /start_weight_update"}
                    receiver.state = "idle"
                else:
                    return 404, {"error": "not found"}
            return 200, {"message": "ok"}

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if receiver is not None and not self.path.startswith("/v1/"):
                try:
                    self.reply(*self.weight_transfer(body))
                except Exception as exc:  # like vLLM: the engine's error as a 500
                    self.reply(500, {"error": f"{type(exc).__name__}: {exc}"})
            elif self.path == "/v1/completions":  # the readiness check's one-token generation
                if os.environ.get("FAKE_VLLM_NO_GENERATE"):  # like an engine that dies on its first request
                    self.reply(500, {"error": "EngineDeadError"})
                    return
                self.reply(200, {"object": "text_completion", "model": body.get("model"),
                                 "choices": [{"index": 0, "text": "x", "finish_reason": "length"}]})
            elif self.path == "/v1/load_lora_adapter" and lora_enabled:
                if any(m["id"] == body["lora_name"] for m in models):  # as vLLM does
                    self.reply(400, {"error": f"The lora adapter '{body['lora_name']}' has already been loaded."})
                    return
                models.append({"id": body["lora_name"], "object": "model", "root": body["lora_path"], "parent": name})
                self.reply(200, f"Success: LoRA adapter '{body['lora_name']}' added successfully.")
            elif self.path == "/v1/unload_lora_adapter" and lora_enabled:
                models[:] = [m for m in models if m["id"] != body["lora_name"]]
                self.reply(200, "Success")
            else:
                self.reply(400 if self.path.endswith("lora_adapter") else 404, {"error": "no"})

    print(f"fake vllm serving {checkpoint} as {name} on {host}:{port}", flush=True)
    ThreadingHTTPServer((host, port), Handler).serve_forever()


if __name__ == "__main__":
    main()
