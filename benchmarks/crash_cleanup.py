#!/usr/bin/env python3
"""Does a `kill -9` of ssrkit leave anything behind, with the machine busy? (issue 30, item 3)

Each run starts `ssrkit validate` (or `ssrkit solve`, alternately) with --jobs 2 on the example artifacts of
textkit, SIGKILLs it AFTER seconds (default 1) after its first sandbox appeared (so that it holds some: on a
busy machine its start alone may take longer than the 2 s of the issue), then looks every 50 ms, for up to
WAIT seconds, at what is left of it: overlay mounts under its temp root, the temp root itself (the RAM copies of the
repository), its sandbox cgroups (`ssrkit-PID-*`) and processes whose environment names its temp root
(the sandboxes' commands). `--load N` keeps N busy processes spinning meanwhile (the machine's own load
comes on top: see `uptime`, printed before and after). A run passes when nothing is left before WAIT;
`gone s` is how long after the kill that was.

Usage:
  python benchmarks/crash_cleanup.py                     # 10 runs, 2 busy processes
  python benchmarks/crash_cleanup.py --runs 3 --src /tmp/base   # another checkout's code (before/after)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _checkout import use_checkout  # noqa: E402

CHECKOUT = use_checkout()

from ssrkit.examples import materialize  # noqa: E402
from ssrkit.sandbox import _cgroup  # noqa: E402
from ssrkit.sandbox.local import _tmp_root  # noqa: E402

ARTIFACTS = ROOT / "examples" / "artifacts" / "textkit"


def ssrkit(*args: str, env: dict[str, str], stderr) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ssrkit", *args], stdout=subprocess.DEVNULL,
                            stderr=stderr, env=env)


def left(pid: int) -> dict[str, int]:
    """What is left of the ssrkit process `pid`'s local sandboxes, by kind."""
    roots = glob.glob(os.path.join(_tmp_root(), f"ssrkit-{pid}-*"))
    with open("/proc/self/mountinfo") as fh:
        mounts = sum(f"/ssrkit-{pid}-" in line.split()[4] for line in fh)
    parents = {p for p in (_cgroup.parent_dir("pids"), _cgroup.parent_dir("memory")) if p}
    cgroups = sum(len(glob.glob(os.path.join(p, f"ssrkit-{pid}-*"))) for p in parents)
    procs = 0
    needle = f"/ssrkit-{pid}-".encode()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/environ", "rb") as fh:
                    procs += needle in fh.read()
            except OSError:
                pass
    sandboxes = sum(len(glob.glob(os.path.join(r, "sb-*"))) for r in roots)
    return {"mounts": mounts, "roots": len(roots), "sandboxes": sandboxes, "cgroups": cgroups, "procs": procs}


def one_run(kind: str, repo: Path, work: Path, after: float, wait: float, env: dict[str, str]) -> dict:
    arts = work / "arts"
    shutil.rmtree(arts, ignore_errors=True)
    shutil.copytree(work / ("validated" if kind == "solve" else "fresh"), arts)
    err = open(work / "stderr.log", "w+b")
    if kind == "validate":
        proc = ssrkit("validate", str(arts), "--repo", str(repo), "--jobs", "2", "--no-cache", env=env, stderr=err)
    else:
        proc = ssrkit("solve", str(arts), "--repo", str(repo), "--solver", "repair", "--attempts", "4", "--jobs",
                      "2", env=env, stderr=err)
    t_start = time.monotonic()
    while not left(proc.pid)["sandboxes"] and proc.poll() is None and time.monotonic() - t_start < 120:
        time.sleep(0.02)
    time.sleep(after)
    at_kill = left(proc.pid)
    at_kill["t"] = round(time.monotonic() - t_start, 2)
    if proc.poll() is not None:  # it ended before the kill: this run proves nothing
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
        raise SystemExit(f"ssrkit {kind} ended before the kill (exit code {proc.returncode}): "
                         f"{lines[-1] if lines else 'no error output'}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    err.close()
    t0 = time.monotonic()
    while True:
        now = left(proc.pid)
        gone = not any(now[k] for k in ("mounts", "roots", "cgroups", "procs"))
        if gone or time.monotonic() - t0 > wait:
            break
        time.sleep(0.05)
    return {"command": kind, "pid": proc.pid, "at_kill": at_kill, "left": now,
            "gone_s": round(time.monotonic() - t0, 3) if gone else None}


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--load", type=int, default=2, help="busy processes spinning during the runs (default 2)")
    ap.add_argument("--after", type=float, default=1.0,
                    help="seconds from the first sandbox to the SIGKILL (default 1)")
    ap.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the leftovers to go")
    ap.add_argument("--json", action="store_true", help="print the runs as JSON too")
    ap.add_argument("--src", metavar="CHECKOUT", help="run the ssrkit code of another checkout (a worktree)")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="ssrkit-crash-"))
    env = {**os.environ, "PYTHONPATH": str(CHECKOUT / "src"), "SSRKIT_CACHE": str(work / "cache")}
    repo = next(p for p in materialize(ROOT / "examples" / "repos", work / "repos") if p.name == "textkit")
    shutil.copytree(ARTIFACTS, work / "fresh", ignore=shutil.ignore_patterns("validation.json", "logs"))
    shutil.copytree(work / "fresh", work / "validated")
    subprocess.run([sys.executable, "-m", "ssrkit", "validate", str(work / "validated"), "--repo", str(repo),
                    "--jobs", "2"], env=env, capture_output=True, timeout=900)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    print(f"before: {uptime()}")
    print(f"code: {CHECKOUT}; {args.load} busy processes; SIGKILL {args.after:g}s after the first sandbox; "
          f"leftovers watched {args.wait:g}s")
    print(f"{'run':>3} {'command':<9} {'killed at s':>11} {'sandboxes':>9} {'mounts':>6} {'cgroups':>7} "
          f"{'procs':>5}  {'left: mounts':>12} {'roots':>5} {'cgroups':>7} {'procs':>5} {'gone s':>7}")
    runs = []
    try:
        for i in range(args.runs):
            r = one_run("validate" if i % 2 == 0 else "solve", repo, work, args.after, args.wait, env)
            runs.append(r)
            k, lf = r["at_kill"], r["left"]
            gone = f"{r['gone_s']:.2f}" if r["gone_s"] is not None else "never"
            print(f"{i + 1:>3} {r['command']:<9} {k['t']:>11.2f} {k['sandboxes']:>9} {k['mounts']:>6} "
                  f"{k['cgroups']:>7} {k['procs']:>5}  {lf['mounts']:>12} {lf['roots']:>5} {lf['cgroups']:>7} "
                  f"{lf['procs']:>5} {gone:>7}")
    finally:
        for s in spinners:
            s.kill()
            s.wait()
        print(f"after: {uptime()}")
        clean = sum(r["gone_s"] is not None for r in runs)
        times = sorted(r["gone_s"] for r in runs if r["gone_s"] is not None)
        slowest = f"; slowest {times[-1]:.2f}s" if times else ""
        print(f"nothing left in {clean} of {len(runs)} runs{slowest}")
        if args.json:
            print(json.dumps(runs, indent=2))
        from ssrkit.sandbox.reap import reap

        reap(docker=False)  # what the runs of an older checkout left (theirs to remove: they are dead)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
