"""A stand-in for `vllm serve CHECKPOINT --host H --port P --served-model-name NAME ...` that serves a script.

`ssrkit serve --command "python tests/selfplay/scripted_vllm.py"` starts it like vLLM: it answers /health,
/v1/models and chat completions (tests/scripted_server.py) from the rule in $SCRIPTED_VLLM_SCRIPT, and
appends the checkpoint it serves to $SCRIPTED_VLLM_LOG, so a test can see which policy each round used. With
`--enable-lora` it also loads adapters (`/v1/load_lora_adapter`, logged the same way).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: scripted_server

from scripted_server import ScriptedServer, load_script  # noqa: E402


def option(args: list[str], name: str, default: str) -> str:
    return args[args.index(name) + 1] if name in args else default


def main(args: list[str]) -> None:
    checkpoint = args[0]
    if not Path(checkpoint, "config.json").is_file():
        sys.exit(f"scripted vllm: {checkpoint} is not a checkpoint directory")
    name = option(args, "--served-model-name", checkpoint)
    server = ScriptedServer(load_script(os.environ["SCRIPTED_VLLM_SCRIPT"]), model=name,
                            host=option(args, "--host", "127.0.0.1"), port=int(option(args, "--port", "8000")))
    if os.environ.get("SCRIPTED_VLLM_LOG"):
        with open(os.environ["SCRIPTED_VLLM_LOG"], "a") as fh:
            fh.write(f"{Path(checkpoint).resolve()}\n")
        if "--enable-lora" in args:  # hot-swapped adapters are logged too
            server.lora_log = os.environ["SCRIPTED_VLLM_LOG"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"scripted vllm: serving {checkpoint} as {name} at {server.base_url}", flush=True)
    server._httpd.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
