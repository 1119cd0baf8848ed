"""What `ssrkit serve` does with the servers it starts: start them, tell the caller once they are ready, then
either leave them running, recorded in their pid files (detached), or stay with them until one exits or Ctrl-C
(KeyboardInterrupt: a SIGTERM handler may raise it too), stopping every one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from .detached import default_pid_file, record_detached
from .server import PolicyServer


def run_server(server: PolicyServer, checkpoint: str | Path, pid_file: Path | None,
               on_ready: Callable[[PolicyServer], None]) -> int | None:
    """Start `server` on `checkpoint` (it stops itself if it never gets ready) and call `on_ready`. With a
    `pid_file` (detached): record it there and return None. Otherwise wait for it: None after Ctrl-C, else the
    exit code of a server that ended on its own; either way its whole process group is stopped."""
    try:
        server.start(str(checkpoint))
        assert server.process is not None
        on_ready(server)
        if pid_file is not None:
            record_detached(server, pid_file)
            return None
        code = server.process.wait()
    except KeyboardInterrupt:
        server.stop()
        return None
    server.stop()
    return code


def run_replicas(servers: list[PolicyServer], checkpoint: str | Path, detach: bool,
                 on_ready: Callable[[list[PolicyServer]], None]) -> PolicyServer | None:
    """Start every server on `checkpoint` (all load at once), wait for each, call `on_ready`. Detached: record
    each in vllm-PORT.pid and return None. Otherwise watch them until one exits or Ctrl-C, stop them all and
    return the first that had exited (None when none had). An error stops them all."""
    try:
        for s in servers:  # all of them load at once; then wait for each
            s.start(str(checkpoint), wait=False)
        for s in servers:
            s.wait_ready()
        on_ready(servers)
        if detach:
            for s in servers:
                record_detached(s, default_pid_file(s.config.port))
            return None
        while all(s.process is not None and s.process.poll() is None for s in servers):
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    except BaseException:
        for s in servers:
            s.stop()
        raise
    dead = [s for s in servers if s.process is not None and s.process.poll() is not None]
    for s in servers:
        s.stop()
    return dead[0] if dead else None
