#!/usr/bin/env python3
"""What the OpenEnv path (`ssrkit env serve`) costs per step, and how many sessions this machine holds.

Two numbers, on a real solver episode (textkit's valid-slug-truncate-off-by-one, local sandbox):

* the per-step overhead: the median time of one cheap step (`true` in bash: the sandbox's exec plus the agent
  loop) in process (`SolverEpisode.step`) and over OpenEnv (a WebSocket client of `ssrkit env serve`, started
  here as a user would), interleaved step by step; the ratio OpenEnv / in process;
* concurrency: k sessions stepping at once (threads, one client each), the median step time at each k over the
  median at k = 1; the largest k whose slowdown stays under 2x ("sessions before steps slow down 2x").

Needs the env extra (pip install 'ssrkit[env]'). Timing on a shared machine is noisy: compare the ratios, and
read the load average printed with them.

    python benchmarks/env_overhead.py
    python benchmarks/env_overhead.py --steps 40 --sessions 1,2,3,4,6,8 --json benchmarks/results/env_overhead.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ssrkit.agents import AgentConfig  # noqa: E402
from ssrkit.env import SolverEpisode  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402
from ssrkit.solve.grade import GradeSettings  # noqa: E402
from ssrkit.sandbox import SandboxOptions  # noqa: E402
from ssrkit.solve import Engine, SolveOptions  # noqa: E402
from ssrkit.store.artifact import Artifact  # noqa: E402
from ssrkit.store.source import RepoSource  # noqa: E402
from ssrkit.validate import Settings, Validator, validate_all  # noqa: E402

TASK = "textkit/valid-slug-truncate-off-by-one"
STEP = "<tool: bash>\ntrue\n</tool>"
PATH = f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def prepare(work: Path) -> tuple[Artifact, RepoSource]:
    """The example artifact, copied and validated on a materialized textkit."""
    import shutil

    [repo] = [p for p in materialize(ROOT / "examples" / "repos", work / "repos") if p.name == "textkit"]
    art = Artifact(shutil.copytree(ROOT / "examples" / "artifacts" / TASK, work / "slug"))
    source = RepoSource.local(repo)
    options = SandboxOptions(env={"PATH": PATH})
    [res] = validate_all([(art, source)], Validator(Settings(cache=False), backend="local", options=options), redo=True)
    if not res["valid"]:
        raise SystemExit(f"{TASK} is not valid here: {res}")
    return art, source


class Server:
    def __init__(self, art: Artifact, source: RepoSource, work: Path, max_sessions: int):
        cfg = work / "ssrkit.toml"
        cfg.write_text(f'[sandbox]\nenv = {{ PATH = "{PATH}" }}\n')
        exe = Path(sys.executable).parent / "ssrkit"
        self.proc = subprocess.Popen(
            [str(exe), "env", "serve", str(art.path), "--repo", str(source.path), "--config", str(cfg), "--port", "0",
             "--max-turns", "100000", "--max-sessions", str(max_sessions)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "COLUMNS": "300"})
        for line in self.proc.stdout:
            m = re.search(r"ws://([\d.]+):(\d+)/ws", line)
            if m:
                self.url = f"http://{m.group(1)}:{m.group(2)}"
                threading.Thread(target=self.proc.stdout.read, daemon=True).start()
                return
        raise SystemExit("ssrkit env serve did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(60)


def client(url: str):
    from openenv.core import GenericEnvClient

    return GenericEnvClient(base_url=url, message_timeout_s=600).sync()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def overhead(art, source, engine, url: str, steps: int) -> dict:
    local, remote = [], []
    with SolverEpisode(art, source, engine=engine, config=AgentConfig(max_turns=100000)) as ep, client(url) as env:
        ep.reset()
        env.reset(task=art.id)
        for _ in range(3):  # warm-up
            ep.step(STEP)
            env.step({"message": STEP})
        for _ in range(steps):
            local.append(timed(lambda: ep.step(STEP)))
            remote.append(timed(lambda: env.step({"message": STEP})))
    a, b = statistics.median(local), statistics.median(remote)
    return {"steps": steps, "in_process_ms": round(a, 2), "openenv_ms": round(b, 2), "ratio": round(b / a, 3)}


def concurrency(art, url: str, ks: list[int], steps: int) -> list[dict]:
    out = []
    for k in ks:
        times: list[float] = []
        lock, barrier = threading.Lock(), threading.Barrier(k)

        def session() -> None:
            with client(url) as env:
                env.reset(task=art.id)
                env.step({"message": STEP})
                barrier.wait()
                mine = [timed(lambda: env.step({"message": STEP})) for _ in range(steps)]
            with lock:
                times.extend(mine)

        threads = [threading.Thread(target=session) for _ in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out.append({"sessions": k, "median_ms": round(statistics.median(times), 2)})
    base = out[0]["median_ms"]
    for row in out:
        row["slowdown"] = round(row["median_ms"] / base, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="timed steps per measurement (default 30)")
    ap.add_argument("--sessions", default="1,2,3,4,6,8", help="concurrent sessions to try (default 1,2,3,4,6,8)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    ks = sorted({int(k) for k in args.sessions.split(",")} | {1})
    engine = Engine(SolveOptions(grade=GradeSettings(timeout=60), backend="local",
                                 sandbox=SandboxOptions(env={"PATH": PATH})))
    with tempfile.TemporaryDirectory(prefix="env-overhead-") as tmp:
        work = Path(tmp)
        art, source = prepare(work)
        srv = Server(art, source, work, max(ks) + 1)
        try:
            load_before = os.getloadavg()[0]
            over = overhead(art, source, engine, srv.url, args.steps)
            rows = concurrency(art, srv.url, ks, args.steps)
            load_after = os.getloadavg()[0]
        finally:
            srv.stop()
    under = [r["sessions"] for r in rows if r["slowdown"] < 2.0]
    result = {"task": TASK, "step": "bash: true", "cpus": os.cpu_count(),
              "load_avg_1m": [round(load_before, 2), round(load_after, 2)], "overhead": over,
              "concurrency": rows, "sessions_before_2x": max(under) if under else 0}
    print(f"machine: {os.cpu_count()} CPUs, 1-min load {load_before:.1f} → {load_after:.1f}")
    print(f"\nper-step time, median of {over['steps']} interleaved steps ({result['step']})")
    print(f"  in process (SolverEpisode.step)   {over['in_process_ms']:8.2f} ms")
    print(f"  OpenEnv (ssrkit env serve, WS)    {over['openenv_ms']:8.2f} ms")
    print(f"  ratio OpenEnv / in process        {over['ratio']:8.3f}")
    print(f"\nconcurrent sessions (OpenEnv), median step time")
    print(f"  {'sessions':>8}  {'median ms':>10}  {'slowdown':>8}")
    for r in rows:
        print(f"  {r['sessions']:>8}  {r['median_ms']:>10.2f}  {r['slowdown']:>7.2f}x")
    print(f"\nsessions before steps slow down 2x: {result['sessions_before_2x']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
