"""Sandbox overhead per backend: workspace setup, per-command cost, snapshot and reset.

    python benchmarks/sandbox_overhead.py [--backends local-bwrap,local-none,docker] [--runs 20] [--src CHECKOUT]

Two repositories are generated in a temp dir: `small` (about 20 files) and `medium` (3000 files, 50 MB, in
60 packages, committed). Columns (milliseconds, median of --runs where repeated):
  setup cold  first sandbox of the repository in this process (local: copies the repository into the
              RAM cache; docker: container start), pristine snapshot included; local: the median over
              --cold copies of the repository (each path is a state of its own, so each is a first copy),
              all written to disk (`sync`) before any is timed, as a user's repository is; printed with
              the copy's floor here and now (a tar pipe of the same copies alone, timed after each)
  setup warm  a further sandbox of the same repository (local: an overlay on the cache, or `cp -a` of it),
              the median of as many as setup cold
  exec        `true` through `run()` (process start, isolation, output pipe, leftover check), commands
              back to back: the next command's sandbox has no time to start ahead (local-bwrap)
  exec spaced the same, each command 30 ms after the last ended (an agent's commands, seconds apart)
  exec reset  the same, each command right after a reset of the sandbox (validation's and grading's runs:
              the reset starts the next sandbox, and the command waits for the rest of its start)
  snapshot    `snapshot()` after one file changed
  reset       `reset()` after ten files changed (modified, added, deleted)
  reset noop  `reset()` when nothing ran since the last reset (known clean: no work at all)
For docker the image is built first (not timed here; it is printed separately). Last, the table of issue 15
(local-bwrap on `medium`) with its targets and whether each is met; the workspace kind in use (overlay or
copy) is printed first.
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _checkout import use_checkout  # noqa: E402

use_checkout()

from ssrkit.sandbox import SandboxOptions, open_sandbox  # noqa: E402
from ssrkit.store.source import RepoSource  # noqa: E402


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=b", "-c", "user.email=b@b", "-C", str(repo), *args], check=True,
                   capture_output=True)


def make_repo(root: Path, name: str, files: int, size: int) -> Path:
    repo = root / name
    rng = random.Random(0)
    for i in range(files):
        d = repo / "pkg" / f"mod{i % 60}"
        d.mkdir(parents=True, exist_ok=True)
        line = f"value_{i} = {i}  # padding padding padding\n"
        n = max(size // len(line), 1)
        (d / f"f{i}.py").write_text(line * (n + rng.randint(0, 20)))
    (repo / ".gitignore").write_text("build/\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    (repo / "build").mkdir()
    (repo / "build" / "generated.txt").write_text("ignored\n")
    return repo


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f}"


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def copy_floor(repo: Path) -> float:
    """The time of the copy alone, here and now: a tar pipe of `repo` into RAM, timed right after the
    repository's first sandbox (the same page-cache state), none of ssrkit's work around it."""
    dest = tempfile.mkdtemp(prefix="ssrkit-floor-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        t = time.perf_counter()
        subprocess.run(f"tar --format=posix -C {shlex.quote(str(repo))} -cf - . | tar -C {shlex.quote(dest)} -xpf -",
                       shell=True, check=True)
        return time.perf_counter() - t
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def bench(source: RepoSource, runs: int, others: list[RepoSource] = ()) -> dict[str, float]:
    """`others`: more first sandboxes to time, of copies of the same repository (closed at once)."""
    out: dict[str, float] = {}
    opts = SandboxOptions()
    colds, floors = [], []
    for other in others:
        t = time.perf_counter()
        sb = open_sandbox(other, "local", opts)
        colds.append(time.perf_counter() - t)
        sb.close()
        floors.append(copy_floor(Path(other.path)))
    t = time.perf_counter()
    sb = open_sandbox(source, "auto" if source.kind == "image" else "local", opts)
    colds.append(time.perf_counter() - t)
    out["setup cold"] = statistics.median(colds)
    if floors:
        out["copy floor"] = statistics.median(floors)
    warms = []
    for _ in range(len(colds)):
        t = time.perf_counter()
        sb2 = open_sandbox(source, "auto" if source.kind == "image" else "local", opts)
        warms.append(time.perf_counter() - t)
        sb2.close()
    out["setup warm"] = statistics.median(warms)
    try:
        sb.run("true", timeout=60)
        out["exec"] = statistics.median(timed(lambda: sb.run("true", timeout=60)) for _ in range(runs))
        spaced = []
        for _ in range(runs):
            time.sleep(0.03)
            spaced.append(timed(lambda: sb.run("true", timeout=60)))
        out["exec spaced"] = statistics.median(spaced)
        sb.snapshot("exec")
        after_reset = []
        for _ in range(runs):
            sb.reset("exec")
            after_reset.append(timed(lambda: sb.run("true", timeout=60)))
        out["exec reset"] = statistics.median(after_reset)
        bwrap = shutil.which("bwrap")
        if bwrap:  # the floor on this machine right now: bubblewrap alone, no view, no limits, no cgroup
            bare = [bwrap, "--ro-bind", "/", "/", "--unshare-user", "--unshare-pid", "true"]
            # and what `run` promises on top: the command is `bash -c COMMAND`
            bash = [bwrap, "--ro-bind", "/", "/", "--unshare-user", "--unshare-pid", "bash", "-c", "true"]
            for key, argv in (("bare bwrap", bare), ("bare bwrap bash", bash)):
                spaced_bare = []
                for _ in range(runs):  # spaced as `exec spaced` is: the same state of the machine's caches
                    time.sleep(0.03)
                    spaced_bare.append(timed(lambda: subprocess.run(argv, capture_output=True)))
                out[key] = statistics.median(spaced_bare)
        snaps, resets, noops = [], [], []
        for i in range(max(runs // 4, 3)):
            sb.run(f"echo {i} >> pkg/mod0/f0.py", timeout=60)
            snaps.append(timed(lambda: sb.snapshot("bench")))
            sb.run("for i in 1 2 3 4 5 6; do echo x >> pkg/mod$i/f$i.py; done; rm pkg/mod7/f7.py; "
                   "echo new > pkg/new1.py; echo new > pkg/new2.py; rm build/generated.txt", timeout=60)
            resets.append(timed(lambda: sb.reset()))
            noops.append(timed(lambda: sb.reset()))
        out["snapshot"] = statistics.median(snaps)
        out["reset"] = statistics.median(resets)
        out["reset noop"] = statistics.median(noops)
    finally:
        sb.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="local-bwrap,local-none,docker")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--cold", type=int, default=5, help="first sandboxes timed per local repository (median)")
    ap.add_argument("--src", metavar="CHECKOUT", help="measure the ssrkit code of another checkout (a worktree)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="ssrkit-bench-", dir="/var/tmp" if os.path.isdir("/var/tmp") else None))
    repos = {"small": make_repo(root, "small", 20, 2_000), "medium": make_repo(root, "medium", 3000, 16_700)}
    copies = {name: [root / f"{name}-{i}" for i in range(1, args.cold)] for name in repos}
    for name, repo in repos.items():
        for c in copies[name]:
            subprocess.run(["cp", "-a", str(repo), str(c)], check=True)
            git(c, "update-index", "-q", "--refresh")  # new inodes: the index's stat data is stale
    os.sync()  # a repository just written is still being written back to disk while it is first read
    for name, repo in repos.items():
        nfiles = sum(len(f) for _, _, f in os.walk(repo))
        mb = sum(os.path.getsize(os.path.join(d, x)) for d, _, f in os.walk(repo) for x in f) / 1e6
        print(f"{name}: {nfiles} files (.git included), {mb:.0f} MB at {repo}")
    images: list[str] = []
    from ssrkit.sandbox.local import LocalSandbox

    probe = LocalSandbox(repos["small"])
    print(f"workspaces: {getattr(probe, 'workspace_kind', 'copy')} ({probe.isolation.get('workspace', 'copy')})")
    probe.close()
    results: dict[tuple[str, str], dict[str, float]] = {}
    cols = ["setup cold", "setup warm", "exec", "exec spaced", "exec reset", "snapshot", "reset", "reset noop"]
    print(f"\n{'backend':<12} {'repo':<7} " + " ".join(f"{c:>10}" for c in cols) + "   (ms)")
    for backend in args.backends.split(","):
        for name, repo in repos.items():
            if backend.startswith("local"):
                from ssrkit.sandbox.local import isolation_available

                iso = backend.split("-", 1)[1]
                if iso == "bwrap" and isolation_available():
                    print(f"{backend:<12} {name:<7} skipped: {isolation_available()}")
                    continue
                os.environ["SSRKIT_LOCAL_ISOLATION"] = iso
                source = RepoSource.local(repo)
            else:
                from ssrkit.sandbox.image import build_image
                from ssrkit.sandbox.factory import docker_available

                why = docker_available()
                if why:
                    print(f"{backend:<12} {name:<7} skipped: {why}")
                    continue
                t = time.perf_counter()
                tag = build_image(repo, tag=f"ssrkit-bench/{name}:latest")
                images.append(tag)
                print(f"{'':<12} {name:<7} (image build {time.perf_counter() - t:.1f} s)")
                source = RepoSource.from_image(tag)
            others = [RepoSource.local(c) for c in copies[name]] if backend.startswith("local") else []
            r = bench(source, args.runs, others)
            results[(backend, name)] = r
            print(f"{backend:<12} {name:<7} " + " ".join(f"{ms(r[c]):>10}" for c in cols))
    subprocess.run(["rm", "-rf", str(root)])
    m = results.get(("local-bwrap", "medium"))
    if m:
        print()
        print(f"{'issue 15 measure (local-bwrap, medium)':<44} {'measured':>14} {'target':>14}  met")
        floor = (f" (bubblewrap alone here and now: {m['bare bwrap'] * 1000:.1f} ms; with `bash -c true` inside, "
                 f"what every command runs: {m['bare bwrap bash'] * 1000:.1f} ms)") if "bare bwrap" in m else ""
        rows = [("sandbox exec (`true`), back to back", f"{m['exec'] * 1000:.1f} ms", "<= 8 ms", m["exec"] <= 0.008),
                ("  30 ms after the last command", f"{m['exec spaced'] * 1000:.1f} ms", "<= 8 ms",
                 m["exec spaced"] <= 0.008),
                ("  right after a reset (no target)", f"{m['exec reset'] * 1000:.1f} ms", "", None)]
        if "bare bwrap" in m:  # issue 30: against its floor here and now, not a fixed number of milliseconds
            rows += [("exec - bubblewrap alone, back to back", f"{(m['exec'] - m['bare bwrap']) * 1000:+.1f} ms",
                      "<= +5 ms", m["exec"] - m["bare bwrap"] <= 0.005),
                     ("  30 ms after the last command", f"{(m['exec spaced'] - m['bare bwrap']) * 1000:+.1f} ms",
                      "<= +5 ms", m["exec spaced"] - m["bare bwrap"] <= 0.005)]
        rows += [("workspace cold / warm", f"{m['setup cold'] * 1000:.0f} / {m['setup warm'] * 1000:.0f} ms",
                  "<= 150 / 50 ms", m["setup cold"] <= 0.150 and m["setup warm"] <= 0.050),
                 ("snapshot after one changed file", f"{m['snapshot'] * 1000:.1f} ms", "<= 20 ms",
                  m["snapshot"] <= 0.020)]
        for what, got, goal, ok in rows:
            print(f"{what:<44} {got:>14} {goal:>14}  {'' if ok is None else 'yes' if ok else 'NO'}")
        print(f"exec{floor}")
        if "copy floor" in m:
            print(f"workspace cold (a tar pipe of the repository alone here and now: {m['copy floor'] * 1000:.0f} ms, "
                  f"so ssrkit's own part is {(m['setup cold'] - m['copy floor']) * 1000:.0f} ms)")
    if images:
        subprocess.run(["docker", "rmi", "-f", *images], capture_output=True)


if __name__ == "__main__":
    main()
