"""One `vllm serve` process group (`PolicyServer`): started, waited ready, refreshed by its strategy, stopped."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO

from ..store.policy import PolicyVersion, alias
from .config import ServeConfig, ServeError
from .launch import MODULE_ENTRY, faithful_logprob_args, policy_of, resolve_launcher
from .process import _group_alive, _http, _stderr_fd, kill_group, port_in_use
from .strategies import STRATEGIES, LoRAStrategy, RefreshStrategy, check_strategy


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
