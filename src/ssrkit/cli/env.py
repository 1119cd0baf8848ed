"""`ssrkit env serve`: ssrkit's solver episodes as an OpenEnv environment (docs/env.md; extra `env`).

The work is `ssrkit.env.server.serve`; this module parses, loads the task set and prints where it listens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import SsrkitError
from .common import BackendOpt, Command, ConfigOpt, MaxTurnsOpt, RepoOpt, TimeoutOpt, config_for, console, safe

env_app = typer.Typer(help="ssrkit episodes as environments for RL trainers (OpenEnv).", no_args_is_help=True,
                      rich_markup_mode="rich")

SERVE_EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit env serve build/arts/slug --repo build/repos/textkit --port 8011[/]   one task
  [cyan]ssrkit env serve --pool runs/r1 --max-sessions 16 --record[/]           a run's active pool tasks

Clients speak OpenEnv over ws://HOST:PORT/ws: reset(task=ID) opens a sandbox and returns the solver's system and
task message; each step(message=REPLY) runs the reply's tool call and returns the observation; the last step holds
the reward (+1 / -1, the hardened grade) and the verdict. GET /ssrkit/info lists the task ids. Give clients a
message timeout of 600 s or more: the last step grades the fix (see docs/env.md).
"""


@env_app.command("serve", epilog=SERVE_EPILOG, cls=Command)
def serve(
    artifacts: Annotated[Optional[List[Path]], typer.Argument(
        help="Valid artifact directories (or directories holding them).", show_default=False,
    )] = None,
    pool: Annotated[Optional[Path], typer.Option(
        "--pool", help="Also serve the active tasks of this run's task pool.", show_default=False,
    )] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8000,
    max_sessions: Annotated[int, typer.Option(
        "--max-sessions", min=1, help="Concurrent sessions (each holds a sandbox); more are refused.",
    )] = 8,
    idle_timeout: Annotated[float, typer.Option(
        "--idle-timeout", min=0, help="Close a session silent this many seconds (0: never).",
    )] = 900.0,
    record: Annotated[bool, typer.Option(
        "--record", help="Keep each finished episode as attempts/NNN of its artifact (ssrkit reward counts it).",
    )] = False,
    max_turns: Annotated[Optional[int], MaxTurnsOpt] = None,
    timeout: Annotated[Optional[float], TimeoutOpt] = None,
    repo: Annotated[Optional[Path], RepoOpt] = None,
    backend: Annotated[Optional[str], BackendOpt] = None,
    config: Annotated[Optional[Path], ConfigOpt] = None,
) -> None:
    """Serve solver episodes of valid artifacts over OpenEnv until Ctrl-C; every sandbox is closed on the way out."""
    from ..agents import AgentConfig
    from ..env.tasks import TaskSet
    from ..solve import Engine, SolveOptions
    from ..store.source import RepoSource

    source = RepoSource.local(repo) if repo is not None else None
    tasks = TaskSet.from_paths(list(artifacts or []), repo=source, pool=pool)  # bad tasks fail before the imports
    try:
        from ..env.server import ServeOptions, serve as run_server
    except ImportError as e:
        raise SsrkitError(f"ssrkit env serve needs the env extra ({e.name} is missing): "
                          f"pip install 'ssrkit[env]'") from None
    for note in tasks.notes:
        console.print(f"[yellow]{safe(note)}[/]", highlight=False)
    cfg = config_for(config, repo)
    options = ServeOptions(tasks=tasks, engine=Engine(SolveOptions.from_config(cfg, backend=backend, timeout=timeout)),
                           agent=AgentConfig.from_config(cfg, max_turns=max_turns), record=record,
                           max_sessions=max_sessions, idle_timeout=idle_timeout or None)

    def ready(server) -> None:
        [sock] = [s for srv in server.servers for s in srv.sockets][:1] or [None]
        bound = sock.getsockname()[1] if sock is not None else port
        console.print(f"ssrkit env: {len(tasks.tasks)} task(s) on ws://{host}:{bound}/ws "
                      f"(GET http://{host}:{bound}/ssrkit/info); Ctrl-C stops", highlight=False, soft_wrap=True)

    run_server(options, host=host, port=port, on_ready=ready)
