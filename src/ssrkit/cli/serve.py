"""`ssrkit serve`: run `vllm serve CHECKPOINT` until Ctrl-C, or start it in the background for a recipe.

ssrkit serve runs/r0/policy --port 8000 --served-model-name policy             # foreground
ssrkit serve runs/r0/policy --detach --pid-file vllm.pid --log vllm.log          # returns once ready
ssrkit serve runs/r1/policy --refresh --pid-file vllm.pid                        # move it to a new checkpoint
ssrkit serve --stop --pid-file vllm.pid                                          # stops the whole group
ssrkit serve runs/r0/policy --replicas 4 --port 8000 --detach                      # one server per GPU, ports 8000-8003

`--strategy` (restart, lora, nccl; chosen at --detach) says how `--refresh` moves the server; the settings live
next to the pid file in vllm.pid.json. The work is done by ssrkit.serving (starting and watching servers:
serving.run; replicas' ports, GPUs and pid files: serving.replicas); this module parses and prints.
"""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

if TYPE_CHECKING:
    from ssrkit.serving import PolicyServer


def serve(
    checkpoint: Annotated[Optional[Path], typer.Argument(help="Checkpoint directory to serve.")] = None,
    port: Annotated[int, typer.Option(help="Port of the OpenAI-compatible server.")] = 8000,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    served_model_name: Annotated[
        Optional[str], typer.Option(help="Model name clients use (default: the path).")
    ] = None,
    command: Annotated[str, typer.Option(help="Server command; the checkpoint and flags are appended.")] = "vllm serve",
    vllm_args: Annotated[
        str, typer.Option("--args", "--vllm-args", help="Extra server flags, e.g. '--max-model-len 32768'.")
    ] = "",
    env: Annotated[
        Optional[list[str]],
        typer.Option("--env", help="KEY=VALUE for the server's environment (repeatable), e.g. "
                     "VLLM_CPU_KVCACHE_SPACE=2."),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for /health and /v1/models.")] = 900.0,
    log: Annotated[
        Optional[Path],
        typer.Option(help="Write the server's output here (default: the terminal; with --detach vllm-PORT.log)."),
    ] = None,
    detach: Annotated[bool, typer.Option("--detach", help="Return once ready, leaving the server running.")] = False,
    pid_file: Annotated[
        Optional[Path],
        typer.Option(
            help="Process-group id file for --detach/--refresh/--stop (default vllm-PORT.pid); "
            "the server's settings go next to it, in PID_FILE.json."
        ),
    ] = None,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the server recorded in --pid-file.")] = False,
    strategy: Annotated[
        Optional[str],
        typer.Option(help="How --refresh moves the server: restart (default), lora or nccl; chosen at start."),
    ] = None,
    refresh: Annotated[
        bool,
        typer.Option("--refresh", help="Move the detached server in --pid-file to CHECKPOINT by its strategy."),
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print {base_url, model, pid, policy} as JSON.")] = False,
    lora_keep: Annotated[int, typer.Option("--lora-keep", min=1, help="lora strategy: adapters kept loaded after a "
                                           "refresh (2 lets requests begun on the previous one finish).")] = 1,
    replicas: Annotated[int, typer.Option("--replicas", min=1, help="Servers on this machine, one per GPU, on "
                                          "consecutive ports from --port (each with its own pid file and log).")] = 1,
) -> None:
    """Serve a policy checkpoint with vLLM (OpenAI-compatible) and wait until it answers."""
    from ssrkit.serving import ServeError

    try:
        if replicas > 1:
            if pid_file is not None or log is not None:
                raise ServeError("--replicas gives each server its own vllm-PORT.pid and vllm-PORT.log; "
                                 "drop --pid-file and --log")
            _replicas(replicas, checkpoint, port, host, served_model_name, command, vllm_args, strategy, timeout,
                      detach, stop, refresh, json_output)
            return
    except ServeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from ssrkit.serving.detached import default_pid_file

    pid_file = pid_file or default_pid_file(port)
    try:
        if stop:
            from ssrkit.serving import stop_detached

            typer.echo(f"stopped server (process group {stop_detached(pid_file)})")
            return
        if checkpoint is None:
            raise ServeError("no checkpoint given")
        if refresh:
            from ssrkit.serving import refresh_detached

            _report(refresh_detached(pid_file, checkpoint, strategy), json_output)
            return
        _start(checkpoint, port, host, served_model_name, command, vllm_args, _env_pairs(env or []),
               strategy or "restart", timeout, log, detach, pid_file, json_output, lora_keep)
    except ServeError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None


def _env_pairs(pairs: list[str]) -> dict[str, str]:
    from ssrkit.serving import ServeError

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ServeError(f"--env {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


def _start(checkpoint: Path, port: int, host: str, served_model_name: Optional[str], command: str, vllm_args: str,
           env: dict[str, str], strategy: str, timeout: float, log: Optional[Path], detach: bool, pid_file: Path,
           json_output: bool, lora_keep: int = 1) -> None:
    from ssrkit.serving import PolicyServer, ServeConfig
    from ssrkit.serving.detached import default_log_file
    from ssrkit.serving.run import run_server

    if detach and log is None:
        log = default_log_file(port)
    config = ServeConfig(
        command=shlex.split(command),
        host=host,
        port=port,
        args=shlex.split(vllm_args),
        served_model_name=served_model_name,
        strategy=strategy,
        ready_timeout=timeout,
        log_file=log,
        env=env,
        lora_keep=lora_keep,
    )
    server = PolicyServer(config)
    if strategy == "nccl" and _versioned(checkpoint):
        typer.echo("warning: the nccl strategy updates weights in place, which vLLM's model names cannot show: "
                   "clients will record the policy version as unknown, and `train --follow` cannot bound "
                   "staleness", err=True)
    if not detach:  # installed before the ready line: a `kill` right after it stops the server like Ctrl-C does
        signal.signal(signal.SIGTERM, _interrupt)
    code = run_server(server, checkpoint, pid_file if detach else None, lambda s: _report(s, json_output))
    if code is not None:
        typer.echo(f"error: server exited with code {code}", err=True)
        raise typer.Exit(1)


def _replicas(n: int, checkpoint: Optional[Path], port: int, host: str, served_model_name: Optional[str],
              command: str, vllm_args: str, strategy: Optional[str], timeout: float, detach: bool, stop: bool,
              refresh: bool, json_output: bool) -> None:
    """N servers of one checkpoint on ports port..port+N-1, server i on GPU i; --stop/--refresh all of them."""
    from ssrkit.serving import ServeConfig, ServeError
    from ssrkit.serving.replicas import refresh_replicas, replica_servers, stop_replicas
    from ssrkit.serving.run import run_replicas

    if stop:
        stop_replicas(port, n, lambda pgid: typer.echo(f"stopped server (process group {pgid})"))
        return
    if checkpoint is None:
        raise ServeError("no checkpoint given")
    if refresh:
        _report_all(refresh_replicas(port, n, checkpoint, strategy), json_output)
        return
    base = ServeConfig(command=shlex.split(command), host=host, port=port, args=shlex.split(vllm_args),
                       served_model_name=served_model_name, strategy=strategy or "restart", ready_timeout=timeout)
    servers = replica_servers(base, n, detach)
    if not detach:
        signal.signal(signal.SIGTERM, _interrupt)
    dead = run_replicas(servers, checkpoint, detach, lambda ready: _report_all(ready, json_output))
    if dead is not None and not detach:
        typer.echo(f"error: the server on port {dead.config.port} exited", err=True)
        raise typer.Exit(1)


def _report_all(servers: list["PolicyServer"], json_output: bool) -> None:
    urls = [s.base_url for s in servers]
    if json_output:
        typer.echo(json.dumps({"base_urls": urls, "base_url": ",".join(urls), "model": servers[0].model,
                               "pids": [s.pid for s in servers]}))
    else:
        for s in servers:
            _report(s, False)
        typer.echo(f"--base-url {','.join(urls)}")


def _versioned(checkpoint: Path) -> bool:
    from ssrkit.serving import policy_of

    return policy_of(checkpoint) is not None


def _report(server: "PolicyServer", json_output: bool) -> None:
    policy = server.policy.turn() if server.policy is not None else None
    if json_output:
        typer.echo(json.dumps({"base_url": server.base_url, "model": server.model, "pid": server.pid,
                               "policy": policy}))
    else:
        version = f", policy step {policy['step']} ({policy['id']})" if policy else ""
        typer.echo(f"serving {server.checkpoint} as {server.model} at {server.base_url} (pid {server.pid}{version})")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(serve)
    app(args=argv if argv is not None else sys.argv[1:], prog_name="ssrkit serve")
