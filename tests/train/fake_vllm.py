"""A stand-in for `vllm serve CHECKPOINT --host H --port P [--served-model-name N] [--enable-lora]`: a real HTTP
server answering /health, /v1/models and /v1/load_lora_adapter, with a child process (like vLLM's workers) so
that tests can see the whole process group go. Environment: FAKE_VLLM_DELAY (seconds before listening),
FAKE_VLLM_FAIL (exit 3 at once), FAKE_VLLM_CHILD_PID (file to write the child's pid to)."""

import json
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def main():
    args = sys.argv[1:]
    assert args[0] == "serve", args
    checkpoint = args[1]
    port = int(option(args, "--port", "8000"))
    host = option(args, "--host", "127.0.0.1")
    name = option(args, "--served-model-name", checkpoint)
    if os.environ.get("FAKE_VLLM_FAIL"):
        print("fake vllm: failing on purpose", flush=True)
        sys.exit(3)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    if os.environ.get("FAKE_VLLM_CHILD_PID"):
        with open(os.environ["FAKE_VLLM_CHILD_PID"], "w") as fh:
            fh.write(str(child.pid))
    time.sleep(float(os.environ.get("FAKE_VLLM_DELAY", "0")))
    models = [{"id": name, "object": "model", "root": checkpoint, "parent": None}]
    lora_enabled = "--enable-lora" in args and os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING") == "True"

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
            else:
                self.reply(404, {"error": "not found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/v1/load_lora_adapter" and lora_enabled:
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
