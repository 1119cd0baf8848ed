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
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ssrkit.config import load_config  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402
from ssrkit.inject.procedural import STRATEGIES, inject  # noqa: E402


def cpu() -> float:
    s = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def measure(repo: Path, out: Path, strategies: list[str], args, env: dict[str, str]) -> dict:
    cfg = load_config(None, repo)
    cfg.section("sandbox").setdefault("env", {}).update(env)
    from ssrkit.cli.common import sandbox_options

    c0, w0 = cpu(), time.monotonic()
    res = inject(repo, out, n=args.n, jobs=args.jobs, seed=args.seed, strategies=strategies, config=cfg,
                 backend="local", options=sandbox_options(cfg))
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repos", default="textkit,ledger")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--strategies", default="expression,removal,history",
                    help="strategies measured alone, in this order (default expression,removal,history)")
    ap.add_argument("--no-all", action="store_true", help="skip the run with every strategy")
    ap.add_argument("--isolation", default="none", choices=["none", "bwrap", "auto"])
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="extra sandbox environment variable (repeatable)")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args()
    os.environ["SSRKIT_LOCAL_ISOLATION"] = args.isolation
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
