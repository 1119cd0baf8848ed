"""`ssrkit serve`: run `vllm serve CHECKPOINT` until Ctrl-C, or start it in the background for a recipe.

ssrkit serve runs/r0/policy --port 8000 --served-model-name policy             # foreground
ssrkit serve runs/r0/policy --detach --pid-file vllm.pid --log vllm.log          # returns once ready
ssrkit serve --stop --pid-file vllm.pid                                          # stops the whole group
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer


def serve(
    checkpoint: Annotated[Optional[Path], typer.Argument(help="Checkpoint directory to serve.")] = None,
    port: Annotated[int, typer.Option(help="Port of the OpenAI-compatible server.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    served_model_name: Annotated[
        Optional[str], typer.Option(help="Model name clients use (default: the path).")
    ] = None,
    command: Annotated[str, typer.Option(help="Server command; the checkpoint and flags are appended.")] = "vllm serve",
    vllm_args: Annotated[str, typer.Option(help="Extra server flags, e.g. '--max-model-len 32768'.")] = "",
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /health and /v1/models.")] = 900.0,
    log: Annotated[
        Optional[Path],
        typer.Option(help="Write the server's output here (default: the terminal; with --detach vllm-PORT.log)."),
    ] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Return once ready, leaving the server running.")] = False,
    pid_file: Annotated[
        Optional[Path], typer.Option(help="Process-group id file for --detach/--stop (default vllm-PORT.pid).")
    ] = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the server recorded in --pid-file.")] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print {base_url, model, pid} as JSON.")] = False,
) -> None:
    """Serve a policy checkpoint with vLLM (OpenAI-compatible) and wait until it answers."""
    from ssrkit.serve import PolicyServer, ServeConfig, ServeError, kill_group

    pid_file = pid_file or Path(f"vllm-{port}.pid")
    if stop:
        try:
            pgid = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            typer.echo(f"error: no server recorded in {pid_file}", err=True)
            raise typer.Exit(2) from None
        kill_group(pgid)
        pid_file.unlink(missing_ok=True)
        typer.echo(f"stopped server (process group {pgid})")
        return
    if checkpoint is None:
        typer.echo("error: no checkpoint given", err=True)
        raise typer.Exit(2)
    if detach and log is None:
        log = Path(f"vllm-{port}.log")
    config = ServeConfig(
        command=shlex.split(command),
        host=host,
        port=port,
        args=shlex.split(vllm_args),
        served_model_name=served_model_name,
        ready_timeout=timeout,
        log_file=log,
    )
    server = PolicyServer(config)
    if not detach:  # installed before the ready line: a `kill` right after it stops the server like Ctrl-C does
        signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start(str(checkpoint))
        assert server.process is not None
        info = {"base_url": server.base_url, "model": server.model, "pid": server.process.pid}
        if json_output:
            typer.echo(json.dumps(info))
        else:
            typer.echo(f"serving {checkpoint} as {server.model} at {server.base_url} (pid {server.process.pid})")
        if detach:
            pid_file.write_text(f"{server.process.pid}\n")
            return
        code = server.process.wait()
    except ServeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        server.stop()
        return
    server.stop()
    typer.echo(f"error: server exited with code {code}", err=True)
    raise typer.Exit(1)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(serve)
    app(args=argv if argv is not None else sys.argv[1:], prog_name="ssrkit serve")
