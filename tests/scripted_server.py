"""A real OpenAI-compatible HTTP server that replays scripted assistant turns — for tests and recipes.

It speaks the wire protocol (stdlib `http.server`, one thread per request) so the code under test uses the
real `openai` client, real sockets and real error statuses; nothing is mocked.

Routes: `POST /v1/chat/completions`, `POST /v1/completions` (one fixed token, outside the script: a readiness
check), `GET /v1/models`, `GET /health`; anything else is a 404.

A script is one of
  - a list of turns, served in order. A turn is a string (the assistant's content) or a dict with any of
      content: str           the reply text
      finish_reason: str     default "stop"
      status: int            answer with this HTTP status instead (an error turn; e.g. 500, 429)
      error: str             the error message for `status`
      headers: dict          extra response headers (e.g. {"Retry-After": "0"})
      delay: float           seconds to wait before answering
      usage: dict            override the reported usage
  - a callable `rule(messages, request) -> turn | None` that makes the next turn from the conversation
    (`request` is the parsed request body); None means the script is exhausted.
An exhausted script answers HTTP 400 "script exhausted" (not retried, so a test fails fast and clearly).

Token ids (`token_ids=`): None — a plain server that ignores vLLM's extra fields; "vllm" — honours
`return_token_ids` (response `prompt_token_ids`, choice `token_ids`) and `logprobs`; "vllm-legacy" — only
`return_tokens_as_token_ids` ("token_id:N" tokens inside logprobs) and `prompt_token_ids` on the choice;
"reject" — answers 400 to requests carrying those fields, like a strict hosted API. Token ids come from a toy
byte-level tokenizer over a simple rendering of the prompt, so prompt ids, completion ids, log-probs and the
reported usage are all consistent with each other.

Every request is recorded in `server.requests` (method, path, headers, parsed body).

Standalone:  python tests/scripted_server.py --script turns.json [--port 8000] [--model NAME]
             [--token-ids vllm] [--require-key-env VAR] [--record requests.jsonl]
`turns.json` holds a JSON list of turns; a `.py` file may define `SCRIPT` (a list or a rule). The server
prints its base URL (`http://127.0.0.1:PORT/v1`) on the first line of stdout and serves until killed.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

Turn = str | dict[str, Any]
Rule = Callable[[list[dict[str, Any]], dict[str, Any]], Turn | None]

_TOKEN_FIELDS = ("return_token_ids", "return_tokens_as_token_ids", "logprobs")


# -- helpers to write scripted turns ----------------------------------------------------------------

def bash(command: str, thought: str = "") -> str:
    return f"{thought}\n<tool: bash>\n{command}\n</tool>".lstrip("\n")


def edit(path: str, search: str, replace: str, thought: str = "") -> str:
    block = f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n>>>>>>> REPLACE"
    return f"{thought}\n<tool: edit path=\"{path}\">\n{block}\n</tool>".lstrip("\n")


def create(path: str, content: str, thought: str = "") -> str:
    return f"{thought}\n<tool: create path=\"{path}\">\n{content.rstrip(chr(10))}\n</tool>".lstrip("\n")


def submit(thought: str = "") -> str:
    return f"{thought}\n<tool: submit>\n</tool>".lstrip("\n")


# -- the toy tokenizer --------------------------------------------------------------------------------

def render_prompt(messages: list[dict[str, Any]]) -> str:
    """A minimal chat template: what the toy tokenizer sees as the prompt."""
    parts = [f"<|{m.get('role')}|>\n{m.get('content') or ''}<|end|>\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


def toy_tokens(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def toy_logprob(position: int, token: int) -> float:
    return -round(((token * 7 + position) % 50) / 100 + 0.001, 3)


# -- the server ---------------------------------------------------------------------------------------

class ScriptedServer:
    """Serve `script` on 127.0.0.1 (a random free port unless `port` is given)."""

    def __init__(self, script: list[Turn] | Rule, *, model: str = "scripted-model",
                 models: list[str] | None = None, api_key: str | None = None, token_ids: str | None = None,
                 host: str = "127.0.0.1", port: int = 0, record: str | None = None):
        if token_ids not in (None, "vllm", "vllm-legacy", "reject"):
            raise ValueError(f"token_ids must be None, 'vllm', 'vllm-legacy' or 'reject', not {token_ids!r}")
        self.script = script
        self.model = model
        self.models = models if models is not None else [model]
        self.cards: list[dict[str, Any]] | None = None  # set: /v1/models lists these (vLLM's id, root, parent)
        self.lora_log: str | None = None  # set: LoRA adapters can be loaded (their paths are appended to this file)
        self.api_key = api_key
        self.token_ids = token_ids
        self.record = record
        self.requests: list[dict[str, Any]] = []
        self.served = 0  # scripted turns consumed (errors included)
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer((host, port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith("/chat/completions")]

    def start(self) -> "ScriptedServer":
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="scripted-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ScriptedServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- request handling (called from handler threads) -------------------------------------------
    def next_turn(self, body: dict[str, Any]) -> Turn | None:
        with self._lock:
            if callable(self.script):
                turn = self.script(body.get("messages") or [], body)
            elif self.served < len(self.script):
                turn = self.script[self.served]
            else:
                turn = None
            if turn is not None:
                self.served += 1
            return turn

    def remember(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)
            if self.record:
                safe = dict(entry, headers={k: ("[redacted]" if k == "authorization" else v)
                                            for k, v in entry["headers"].items()})
                with open(self.record, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(safe) + "\n")

    def chat(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str], float]:
        """(status, JSON body, extra headers, delay) for one chat request."""
        if body.get("model") not in self.models:
            return 404, {"error": {"message": f"The model `{body.get('model')}` does not exist.",
                                   "type": "NotFoundError", "param": "model", "code": 404}}, {}, 0.0
        if self.token_ids == "reject":
            extra = [f for f in _TOKEN_FIELDS if body.get(f)]
            if extra:
                return 400, {"error": {"message": f"Unrecognized request argument supplied: {extra[0]}",
                                       "type": "invalid_request_error", "param": extra[0]}}, {}, 0.0
        turn = self.next_turn(body)
        if turn is None:
            return 400, {"error": {"message": f"scripted server: script exhausted after {self.served} turns",
                                   "type": "BadRequestError"}}, {}, 0.0
        if isinstance(turn, str):
            turn = {"content": turn}
        delay = float(turn.get("delay", 0.0))
        headers = dict(turn.get("headers") or {})
        if "status" in turn:
            status = int(turn["status"])
            return status, {"error": {"message": turn.get("error", f"scripted error {status}"),
                                      "type": "ScriptedError", "code": status}}, headers, delay
        return 200, self._completion(body, turn), headers, delay

    def _completion(self, body: dict[str, Any], turn: dict[str, Any]) -> dict[str, Any]:
        content = str(turn.get("content", ""))
        prompt_ids = toy_tokens(render_prompt(body.get("messages") or []))
        completion_ids = toy_tokens(content)
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": content},
                                  "finish_reason": turn.get("finish_reason", "stop"), "logprobs": None}
        response: dict[str, Any] = {
            "id": f"chatcmpl-scripted-{self.served}", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model"), "choices": [choice],
            "usage": turn.get("usage") or {"prompt_tokens": len(prompt_ids),
                                           "completion_tokens": len(completion_ids),
                                           "total_tokens": len(prompt_ids) + len(completion_ids)},
        }
        if self.token_ids in ("vllm", "vllm-legacy") and body.get("logprobs"):
            as_ids = bool(body.get("return_tokens_as_token_ids"))
            choice["logprobs"] = {"content": [
                {"token": f"token_id:{t}" if as_ids else bytes([t]).decode("latin-1"),
                 "logprob": toy_logprob(i, t), "bytes": [t], "top_logprobs": []}
                for i, t in enumerate(completion_ids)]}
        if self.token_ids == "vllm" and body.get("return_token_ids"):
            response["prompt_token_ids"] = prompt_ids
            choice["token_ids"] = completion_ids
        if self.token_ids == "vllm-legacy" and body.get("return_tokens_as_token_ids"):
            choice["prompt_token_ids"] = prompt_ids
        return response


def _handler_for(server: ScriptedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *args: Any) -> None:  # keep test output quiet
            pass

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = b"" if body is None else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> dict[str, Any] | None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8", errors="replace") if length else ""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            server.remember({"method": self.command, "path": self.path, "raw": raw, "body": body,
                             "headers": {k.lower(): v for k, v in self.headers.items()}})
            return body

        def _authorized(self) -> bool:
            if server.api_key is None or self.headers.get("Authorization") == f"Bearer {server.api_key}":
                return True
            self._send(401, {"error": {"message": "Incorrect API key provided.", "type": "invalid_request_error",
                                       "code": "invalid_api_key"}})
            return False

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._record()
            path = self.path.split("?", 1)[0]
            if path == "/health":
                self._send(200, None)
            elif path == "/v1/models":
                if self._authorized():
                    self._send(200, {"object": "list", "data": server.cards if server.cards is not None else [
                        {"id": m, "object": "model", "created": 0, "owned_by": "scripted"}
                        for m in server.models]})
            else:
                self._send(404, {"detail": "Not Found"})

        def do_POST(self) -> None:  # noqa: N802
            body = self._record()
            route = self.path.split("?", 1)[0]
            if route == "/v1/completions" and isinstance(body, dict) and body.get("model") in server.models:
                # a plain completion (what `ssrkit serve`'s readiness check sends): one token, outside the script
                self._send(200, {"object": "text_completion", "model": body.get("model"),
                                 "choices": [{"index": 0, "text": " ", "finish_reason": "length"}]})
                return
            if route in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") and server.lora_log is not None:
                name = str((body or {}).get("lora_name", ""))
                if route == "/v1/load_lora_adapter":
                    server.models.append(name)
                    with open(server.lora_log, "a", encoding="utf-8") as fh:
                        fh.write(f"{Path(str(body.get('lora_path'))).resolve()}\n")
                elif name in server.models:
                    server.models.remove(name)
                self._send(200, {"message": "ok"})
                return
            if route != "/v1/chat/completions":
                self._send(404, {"detail": "Not Found"})
                return
            if not self._authorized():
                return
            if not isinstance(body, dict):
                self._send(400, {"error": {"message": "request body is not a JSON object"}})
                return
            status, payload, headers, delay = server.chat(body)
            if delay:
                time.sleep(delay)
            try:
                self._send(status, payload, headers)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (e.g. its timeout)
                pass

    return Handler


def load_script(path: str) -> list[Turn] | Rule:
    """A JSON list of turns, or a Python file defining SCRIPT."""
    if path.endswith(".py"):
        namespace = runpy.run_path(path)
        if "SCRIPT" not in namespace:
            raise SystemExit(f"{path} defines no SCRIPT")
        return namespace["SCRIPT"]
    with open(path, encoding="utf-8") as fh:
        script = json.load(fh)
    if not isinstance(script, list):
        raise SystemExit(f"{path}: a script is a JSON list of turns")
    return script


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Serve scripted assistant turns over the OpenAI chat API.")
    p.add_argument("--script", required=True, help="JSON list of turns, or a .py file defining SCRIPT")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default: a free one)")
    p.add_argument("--model", default="scripted-model")
    p.add_argument("--token-ids", choices=["vllm", "vllm-legacy", "reject"], default=None)
    p.add_argument("--require-key-env", default=None,
                   help="require the API key held in this environment variable (never on the command line)")
    p.add_argument("--record", default=None, help="append every request as a JSON line (keys redacted)")
    args = p.parse_args(argv)
    key = os.environ.get(args.require_key_env) if args.require_key_env else None
    server = ScriptedServer(load_script(args.script), model=args.model, api_key=key, token_ids=args.token_ids,
                            port=args.port, record=args.record)
    print(server.base_url, flush=True)
    try:
        server._httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server._httpd.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])


__all__ = ["ScriptedServer", "bash", "create", "edit", "load_script", "render_prompt", "submit", "toy_logprob",
           "toy_tokens"]
