"""A detached server (`ssrkit serve --detach`), found again through its pid file: its records, refresh, stop.

`ssrkit serve --detach` writes the process-group id to PID_FILE (what scripts read) and the server's settings to
PID_FILE.json, so that a later `--refresh` can rebuild the PolicyServer (by `attach`) and move it by its strategy.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..store.fsutil import atomic_write_json, atomic_write_text
from ..store.policy import PolicyVersion
from .config import ServeConfig, ServeError
from .process import kill_group
from .server import PolicyServer
from .strategies import LoRAStrategy, check_strategy


def default_pid_file(port: int) -> Path:
    """`vllm-PORT.pid` in the working directory: the pid file of the server on PORT when none is named (each
    replica's)."""
    return Path(f"vllm-{port}.pid")


def default_log_file(port: int) -> Path:
    """`vllm-PORT.log` in the working directory: where a detached server on PORT writes when no log is named."""
    return Path(f"vllm-{port}.log")


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
