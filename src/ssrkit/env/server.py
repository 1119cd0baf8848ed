"""`ssrkit env serve`: solver episodes over OpenEnv's WebSocket protocol (extra `env`: openenv-core).

One OpenEnv session (one `/ws` connection) is one environment instance; each `reset(task=ID)` opens a fresh
`SolverEpisode` with its own sandbox, closing the session's previous one. Only the production routes are
served (`/ws`, `/health`, `/schema`, `/metadata`): OpenEnv's stateless HTTP `/reset` and `/step` would open and
close a sandbox per call. ssrkit adds `GET /ssrkit/info`. When a client goes away (a close frame, a dropped
connection, or `--idle-timeout` without a message) OpenEnv closes its environment, and with it the sandbox;
on shutdown (Ctrl-C, SIGTERM) every sandbox still open is closed.

Errors a client can cause (unknown task, step before reset, a finished episode) come back as OpenEnv error
messages holding ssrkit's one-line message; anything else as "internal error" (the details are logged here,
never sent). Observations hold only what the sandbox printed: the sandbox never sees this process's secrets.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from openenv.core.env_server import Action, Environment, Observation, State
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import ConcurrencyConfig, ServerMode
from pydantic import Field

from ..agents import AgentConfig
from ..errors import SsrkitError
from ..solve import Engine
from .solver import SolverEpisode
from .tasks import TaskSet

log = logging.getLogger("ssrkit.env")

#: an error message sent to a client is cut here (a model's reply can be echoed in it)
MESSAGE_LIMIT = 2000


class SolverAction(Action):
    """The model's whole reply (one ssrkit tool call); optional generator facts for the loop's limits."""

    message: str = Field(..., description="the assistant's reply: one ssrkit tool call, e.g. <tool: bash>ls</tool>")
    finish_reason: str | None = Field(None, description="'length' when generation was cut off (a format error)")
    usage: dict[str, int] | None = Field(None, description="token counts of this call (total_tokens) for the "
                                                           "context budget; default: a chars/4 estimate")


class SolverObservation(Observation):
    """`messages`: after reset the system and task message, after a step the new user message(s) (none once
    done). On the last step `done`, `reward` (+1 / -1, the hardened grade) and `result` (the verdict)."""

    messages: list[dict[str, str]] = Field(default_factory=list)
    result: dict[str, Any] | None = Field(None, description="on the last step: exit_status, passed, reason, fix")


class SolverState(State):
    task: str | None = None
    exit_status: str | None = None


@dataclass
class ServeOptions:
    tasks: TaskSet
    engine: Engine = field(default_factory=Engine)
    agent: AgentConfig = field(default_factory=AgentConfig)
    record: bool = False  # write each finished episode as attempts/NNN of its artifact
    max_sessions: int = 8
    idle_timeout: float | None = 900.0  # a session with no message for this long is closed (None: never)


class SolverEnvironment(Environment[SolverAction, SolverObservation, SolverState]):
    """One session's environment. Cheap to build (OpenEnv builds one per connection, and probes the factory):
    the sandbox opens at reset."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, options: ServeOptions):
        super().__init__()
        self.options = options
        self._episode: SolverEpisode | None = None
        self._state = SolverState()

    def reset(self, seed: int | None = None, episode_id: str | None = None, task: str | None = None,
              **_: Any) -> SolverObservation:
        with _client_errors():
            self.close()
            artifact, source = self.options.tasks.get(task)
            self._state = SolverState(episode_id=episode_id, task=artifact.id)
            self._episode = SolverEpisode(artifact, source, engine=self.options.engine, config=self.options.agent,
                                          record=self.options.record)
            _count(+1)
            messages = self._episode.reset()
            return SolverObservation(messages=messages, done=self._episode.done)

    def step(self, action: SolverAction, timeout_s: float | None = None, **_: Any) -> SolverObservation:
        with _client_errors():
            if self._episode is None:
                raise SsrkitError("call reset(task=ID) first")
            r = self._episode.step(action.message, finish_reason=action.finish_reason, usage=action.usage)
            self._state.step_count += 1
            if not r.done:
                return SolverObservation(messages=r.messages)
            self._state.exit_status = r.info.get("exit_status")
            return SolverObservation(messages=[], done=True, reward=r.reward, result=r.info)

    @property
    def state(self) -> SolverState:
        return self._state

    def close(self) -> None:
        ep, self._episode = self._episode, None
        if ep is not None:
            ep.close()
            _count(-1)


# -- what a client sees of an error ---------------------------------------------------------------

class _client_errors:
    """ssrkit's own errors go to the client as they are; anything else as "internal error" (logged here)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> bool:
        if exc is None or isinstance(exc, SsrkitError) and len(str(exc)) <= MESSAGE_LIMIT:
            return False
        if isinstance(exc, SsrkitError):
            raise SsrkitError(str(exc)[:MESSAGE_LIMIT] + " …") from None
        if isinstance(exc, Exception):
            log.error("env: %s", exc, exc_info=(kind, exc, tb))
            raise SsrkitError(f"internal error ({type(exc).__name__}); see the server's log") from None
        return False


#: live episodes (sessions that reset and were not closed yet): for /ssrkit/info and the tests
_live = 0
_live_lock = threading.Lock()


def _count(delta: int) -> None:
    global _live
    with _live_lock:
        _live += delta


def live_episodes() -> int:
    return _live


# -- the app ------------------------------------------------------------------------------------

def create_app(options: ServeOptions) -> Any:
    """The FastAPI app: OpenEnv's production routes for `SolverEnvironment`, plus `GET /ssrkit/info`."""
    from fastapi import FastAPI

    app = FastAPI(title="ssrkit env", description="ssrkit solver episodes (OpenEnv)")
    server = HTTPEnvServer(lambda: SolverEnvironment(options), SolverAction, SolverObservation,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=options.max_sessions,
                                                                session_timeout=options.idle_timeout))
    server.register_routes(app, mode=ServerMode.PRODUCTION)

    @app.get("/ssrkit/info")
    def info() -> dict[str, Any]:
        return {"ids": sorted(options.tasks.tasks), "live_episodes": live_episodes(),
                "max_sessions": options.max_sessions}

    return app


class _QuietClose(logging.Filter):
    """openenv-core 0.3.0 logs a traceback for every normal WebSocket close (it closes a closed socket) and for
    every client that went away: both are a session's ordinary end, already cleaned up."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None or not record.getMessage().startswith("Exception in ASGI application"):
            return True
        chain = []
        while exc is not None and len(chain) < 8:
            chain.append(exc)
            exc = exc.__cause__ or exc.__context__
        return not any("websocket.close" in str(e) or type(e).__name__ in ("ClientDisconnected", "WebSocketDisconnect")
                       for e in chain)


def serve(options: ServeOptions, *, host: str = "127.0.0.1", port: int = 8000,
          on_ready: Any = None) -> None:
    """Serve until stopped; every sandbox still open is closed on the way out."""
    import uvicorn

    from ..sandbox import _cleanup

    logging.getLogger("uvicorn.error").addFilter(_QuietClose())
    config = uvicorn.Config(create_app(options), host=host, port=port, log_level="warning", ws_ping_interval=20,
                            ws_ping_timeout=20)
    server = uvicorn.Server(config)
    if on_ready is not None:
        threading.Thread(target=_when_started, args=(server, on_ready), daemon=True).start()
    try:
        server.run()
    finally:
        _cleanup.close_all()


def _when_started(server: Any, on_ready: Any) -> None:
    import time

    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        on_ready(server)
