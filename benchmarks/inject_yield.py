#!/usr/bin/env python3
"""Yield and throughput of the procedural injector on the example repositories.

For each repository and strategy: candidates tried, valid artifacts, yield (valid / tried) and valid
artifacts per CPU-minute.

CPU time = this process + all its children (`resource.getrusage(RUSAGE_SELF)` + `RUSAGE_CHILDREN`): every
test run, parser run and git command included. The local sandbox backend is run without bubblewrap
(SSRKIT_LOCAL_ISOLATION=none) by default because processes inside bubblewrap's PID namespace are not reported
to the parent's RUSAGE_CHILDREN; pass --isolation auto to measure the isolated backend (its CPU column then
undercounts, and wall × jobs is the honest figure).

Each repository gets a fresh coverage cache: the first run (expression) includes the per-test coverage
mapping of the whole suite, reported separately as `map`. The `all` rows are one run with every strategy
(combine needs the others' artifacts), their per-strategy yields taken from that run.

    python benchmarks/inject_yield.py                      # textkit and ledger, n=20 per run
    python benchmarks/inject_yield.py --n 10 --jobs 2 --json results.json
    python benchmarks/inject_yield.py --env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1   # no pytest entry-point plugins
    python benchmarks/inject_yield.py --strategies history --no-all             # one strategy alone

Real repositories (`--real`), the way a new user would run ssrkit: for each repository (optionally
`PATH=VENV`, else PATH/.venv or PATH/venv, else the current environment), with that virtualenv activated
and no ssrkit.toml added, `ssrkit inject PATH --out DIR --n N` then `ssrkit validate DIR`, each as a
command, with a fresh ssrkit cache (the coverage map and the original runs are made anew). One row per
repository: commit, tests, the repository's own suite time (the command ssrkit maps coverage with, run
without coverage in the same virtualenv, once before and once after ssrkit; their mean), ssrkit's wall
(inject + validate), their ratio, valid/written, the strategies that produced artifacts, and for a miss the
diagnosis ssrkit printed (a traceback anywhere is reported as such). The last line gives the median ratio:
a ratio within one run, so a machine's load cancels out as far as it can.

    python benchmarks/inject_yield.py --real /tmp/trial/parse=/tmp/trial/venvs/parse ~/src/mylib --n 3
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ssrkit.store.config import load_config  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402
from ssrkit.inject.procedural import STRATEGIES, inject  # noqa: E402


def cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def measure(repo: Path, out: Path, strategies: list[str], args, env: dict[str, str]) -> dict:
    cfg = load_config(None, repo)
    cfg.section("sandbox").setdefault("env", {}).update(env)
    from ssrkit.sandbox import SandboxOptions

    c0, w0 = cpu(), time.monotonic()
    res = inject(repo, out, n=args.n, jobs=args.jobs, seed=args.seed, strategies=strategies, config=cfg,
                 backend="local", options=SandboxOptions.from_config(cfg))
    c1, w1 = cpu(), time.monotonic()
    return {"result": res, "cpu": c1 - c0, "wall": w1 - w0}


def row(repo: str, strategy: str, tried: int, valid: int, cpu_s: float | None, wall: float | None, jobs: int,
        note: str = "") -> dict:
    return {"repo": repo, "strategy": strategy, "tried": tried, "valid": valid,
            "yield": round(valid / tried, 3) if tried else 0.0,
            "cpu_s": None if cpu_s is None else round(cpu_s, 2),
            "valid_per_cpu_min": None if not cpu_s else round(valid / (cpu_s / 60), 1),
            "wall_s": None if wall is None else round(wall, 2),
            "valid_per_wall_jobs_min": None if not wall else round(valid / (wall * jobs / 60), 1),
            "note": note}


def _venv_of(item: str) -> tuple[Path, Path | None]:
    path, sep, venv = item.partition("=")
    repo = Path(path).expanduser().resolve()
    if sep:
        return repo, Path(venv).expanduser().resolve()
    for name in (".venv", "venv"):
        if (repo / name / "pyvenv.cfg").is_file():
            return repo, repo / name
    return repo, None


def _ssrkit(args: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ssrkit", *args]
    try:
        return subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        return subprocess.CompletedProcess(cmd, 124, e.stdout or "", f"timed out after {timeout:g}s")


class _Dir:
    """A repository directory read as `runner.detect_runner` reads a sandbox."""

    def __init__(self, root: Path):
        self.root = root

    def read_file(self, path: str) -> bytes:
        return (self.root / path).read_bytes()


def suite_command(repo: Path) -> str:
    """The command ssrkit runs the whole suite with (`Profile.full_command`, without coverage)."""
    from ssrkit.inject.runner import Profile, detect_runner

    files = subprocess.run(["git", "-C", str(repo), "ls-files", "-co", "--exclude-standard", "--", "*.py"],
                           capture_output=True, text=True).stdout.split()
    return Profile(detect_runner(_Dir(repo), files)).full_command()  # type: ignore[arg-type]


def suite_seconds(repo: Path, env: dict[str, str], timeout: float) -> float | None:
    """Wall seconds of the repository's whole suite, run as ssrkit would run it (None: it did not finish)."""
    t0 = time.monotonic()
    try:
        subprocess.run(["bash", "-c", suite_command(repo)], env=env, cwd=repo, capture_output=True,
                       timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return time.monotonic() - t0


def real_row(item: str, out_root: Path, args) -> dict:
    """inject + validate on one real repository, as commands, in its own virtualenv, between two timings
    of the repository's own suite."""
    repo, venv = _venv_of(item)
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT / "src")
    env["SSRKIT_CACHE"] = str(out_root / f".cache-{repo.name}")  # fresh: coverage map and original runs made anew
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    out = out_root / repo.name
    suite_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    suite_before = suite_seconds(repo, suite_env, args.timeout)
    t0 = time.monotonic()
    inj = _ssrkit(["inject", str(repo), "--out", str(out), "--n", str(args.n), "--seed", str(args.seed), "--json"],
                  env, out_root, args.timeout)
    val = _ssrkit(["validate", str(out), "--json"], env, out_root, args.timeout) if out.is_dir() else None
    wall = time.monotonic() - t0
    suite_after = suite_seconds(repo, suite_env, args.timeout)
    suites = [s for s in (suite_before, suite_after) if s is not None]
    suite = sum(suites) / len(suites) if suites else None
    summary: dict = {}
    try:
        summary = json.loads((out / "inject.json").read_text())
    except (OSError, ValueError):
        pass
    run = summary.get("run") or {}
    reports = []
    if val is not None:
        try:
            reports = json.loads(val.stdout or "[]")
        except ValueError:
            reports = []
    written = len(summary.get("artifacts") or [])
    valid = sum(1 for r in reports if isinstance(r, dict) and r.get("valid"))
    strategies = sorted({a["strategy"] for a in summary.get("artifacts") or []})
    statuses: dict[str, int] = {}
    for st in (summary.get("by_strategy") or {}).values():
        for k, v in (st.get("statuses") or {}).items():
            statuses[k] = statuses.get(k, 0) + v
    texts = [inj.stdout, inj.stderr] + ([val.stdout, val.stderr] if val is not None else [])
    note = ""
    if any("Traceback (most recent call last)" in t for t in texts):
        note = "TRACEBACK: " + next(t for t in texts if "Traceback" in t).strip().splitlines()[-1][:200]
    elif valid == 0:
        lines = run.get("diagnosis") or [ln for ln in inj.stderr.strip().splitlines() if ln.strip()][-3:]
        note = " | ".join(lines)[:600] or f"inject exit code {inj.returncode}"
    return {"repo": repo.name, "commit": head.stdout.strip() or "?", "tests": run.get("tests"),
            "suite_s": None if suite is None else round(suite, 2),
            "suite_runs_s": [None if x is None else round(x, 2) for x in (suite_before, suite_after)],
            "wall_s": round(wall, 1), "ratio": None if not suite else round(wall / suite, 1), "valid": valid, "written": written, "strategies": ",".join(strategies),
            "tried": sum(statuses.values()), "statuses": statuses, "inject_s": run.get("seconds"),
            "coverage_s": run.get("coverage_seconds"), "tracer": run.get("tracer", ""), "notes": run.get("notes", []), "inject_exit": inj.returncode,
            "validate_exit": None if val is None else val.returncode, "diagnosis": note}


def main_real(args) -> int:
    rows = []
    print(f"{'repository':22} {'commit':12} {'tests':>6} {'suite':>7} {'wall':>7} {'ratio':>6} {'valid/written':>13}  "
          "strategies / diagnosis", flush=True)
    with tempfile.TemporaryDirectory(prefix="ssrkit-real-") as tmp:
        out_root = Path(args.out) if args.out else Path(tmp)
        out_root.mkdir(parents=True, exist_ok=True)
        for item in args.real:
            r = real_row(item, out_root, args)
            rows.append(r)
            tail = r["strategies"] + (f"  {r['diagnosis']}" if r["diagnosis"] else "")
            suite = "?" if r["suite_s"] is None else f"{r['suite_s']:.1f}s"
            ratio = "?" if r["ratio"] is None else f"{r['ratio']:.1f}x"
            print(f"{r['repo']:22} {r['commit']:12} {str(r['tests']):>6} {suite:>7} {r['wall_s']:6.1f}s {ratio:>6} "
                  f"{str(r['valid']) + '/' + str(r['written']):>13}  {tail}", flush=True)
    hits = sum(1 for r in rows if r["valid"])
    ratios = sorted(r["ratio"] for r in rows if r["ratio"] is not None)
    median = None if not ratios else (ratios[len(ratios) // 2] if len(ratios) % 2 else
                                      (ratios[len(ratios) // 2 - 1] + ratios[len(ratios) // 2]) / 2)
    print(f"{hits}/{len(rows)} repositories with a valid artifact; "
          f"{sum(r['valid'] for r in rows)}/{sum(r['written'] for r in rows)} artifacts valid; median ratio "
          f"(ssrkit's wall / the suite's) {'?' if median is None else f'{median:.1f}x'}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"settings": {"n": args.n, "seed": args.seed}, "median_ratio": median,
                                         "rows": rows}, indent=2))
    return 0 if hits == len(rows) else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", nargs="+", metavar="REPO[=VENV]",
                    help="real repositories: inject + validate each as commands, in its virtualenv (see above)")
    ap.add_argument("--out", help="--real: keep the artifacts under this directory (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="--real: seconds per command")
    ap.add_argument("--repos", default="textkit,ledger")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--strategies", default="expression,removal,history",
                    help="strategies measured alone, in this order (default expression,removal,history)")
    ap.add_argument("--no-all", action="store_true", help="skip the run with every strategy")
    ap.add_argument("--isolation", choices=["none", "bwrap", "auto"],
                    help="local sandbox isolation (default none; --real: auto, as a user gets it)")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra sandbox environment variable (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args()
    if args.real:
        if args.isolation:
            os.environ["SSRKIT_LOCAL_ISOLATION"] = args.isolation
        return main_real(args)
    os.environ["SSRKIT_LOCAL_ISOLATION"] = args.isolation or "none"
    env = dict(kv.split("=", 1) for kv in args.env)

    rows = []
    with tempfile.TemporaryDirectory(prefix="ssrkit-bench-") as tmp:
        tmp = Path(tmp)
        repos = materialize(ROOT / "examples" / "repos", tmp / "repos", args.repos.split(","))
        for repo in repos:
            os.environ["SSRKIT_CACHE"] = str(tmp / f"cache-{repo.name}")  # fresh: the first run maps coverage
            for i, strategy in enumerate(s.strip() for s in args.strategies.split(",") if s.strip()):
                m = measure(repo, tmp / f"out-{repo.name}-{strategy}", [strategy], args, env)
                st = m["result"].stats[strategy]
                cov = m["result"].coverage_seconds
                note = f"incl. coverage map ({cov:.1f}s wall)" if i == 0 else ""
                rows.append(row(repo.name, strategy, st.tried, st.valid, m["cpu"], m["wall"], args.jobs, note))
                print(_fmt(rows[-1]), flush=True)
            if args.no_all:
                continue
            m = measure(repo, tmp / f"out-{repo.name}-all", list(STRATEGIES), args, env)
            res = m["result"]
            for strategy, st in res.stats.items():
                rows.append(row(repo.name, f"all:{strategy}", st.tried, st.valid, None, None, args.jobs,
                                f"kept {st.kept}"))
                print(_fmt(rows[-1]), flush=True)
            tried = sum(st.tried for st in res.stats.values())
            rows.append(row(repo.name, "all", tried, len(res.artifacts), m["cpu"], m["wall"], args.jobs,
                            f"{len(res.artifacts)}/{args.n} kept"))
            print(_fmt(rows[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)}, "rows": rows}, indent=2))
    return 0


def _fmt(r: dict) -> str:
    cpu_s = "" if r["cpu_s"] is None else f"{r['cpu_s']:7.1f}s cpu {r['valid_per_cpu_min']:6.1f}/cpu-min"
    return (f"{r['repo']:8} {r['strategy']:16} tried {r['tried']:3}  valid {r['valid']:3}  yield {r['yield']:5.0%}  "
            f"{cpu_s:32} {r['note']}")


if __name__ == "__main__":
    sys.exit(main())
