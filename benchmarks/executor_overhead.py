#!/usr/bin/env python3
"""What `--executor ray` costs against the local executor, on one machine.

Three numbers, each for the local executor (the thread pool of `--jobs`) and for Ray on a 3-node cluster
started here (`ray.cluster_utils.Cluster`, one sandbox slot per node):

* dispatch overhead per unit (ms): N no-op units, one at a time (submit → result), and N at once
  (the wall time / N at the same concurrency);
* the wall time of validating every example artifact (examples/artifacts, textkit and ledger) at equal
  concurrency (`--slots`, default 3), each executor with fresh caches; the ratio Ray / local (the target is
  at most 1.10 on one machine);
* recovery after a node is killed: the same validation on Ray with one worker node killed (no grace) when
  the first artifact is done — the run's wall time, how much longer than without the kill, and whether the
  verdicts are still those of the local run.

Needs the ray extra (pip install 'ssrkit[ray]').

    python benchmarks/executor_overhead.py
    python benchmarks/executor_overhead.py --units 200 --slots 3 --json results.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from ssrkit.artifact import Artifact  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402
from ssrkit.executor import Executor, LocalExecutor, run_units  # noqa: E402
from ssrkit.source import RepoSource  # noqa: E402
from ssrkit.validate import Settings, Validator, validate_all  # noqa: E402

EXPECTED = json.loads((ROOT / "examples" / "artifacts" / "expected.json").read_text())


def noop(x: int) -> int:
    return x


def dispatch_ms(ex: Executor, units: int) -> tuple[float, float]:
    """(ms per unit one at a time, ms per unit with `ex.slots` in flight)."""
    run_units(ex, noop, [(i,) for i in range(min(units, 10))])  # warm-up: workers started, function shipped
    lat = []
    for i in range(units):
        t0 = time.perf_counter()
        ex.submit(noop, i).result()
        lat.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    run_units(ex, noop, [(i,) for i in range(units)])
    return statistics.median(lat) * 1000, (time.perf_counter() - t0) / units * 1000


def artifacts(repos: dict[str, Path], dest: Path) -> list[tuple[Artifact, RepoSource]]:
    items = []
    for rel in sorted(EXPECTED):
        d = dest / rel
        shutil.copytree(ROOT / "examples" / "artifacts" / rel, d,
                        ignore=shutil.ignore_patterns("validation.json", "logs", "attempts", "reward.json"))
        items.append((Artifact(d), RepoSource.local(repos[rel.split("/")[0]])))
    return items


def verdicts(results: list[dict]) -> list[tuple]:
    return [(r["valid"], [(c["name"], c["status"]) for c in r["checks"]]) for r in results]


def timed_validation(ex: Executor, repos, work: Path, slots: int, on_first=None) -> tuple[float, list[dict]]:
    os.environ["SSRKIT_CACHE"] = str(work / "driver-cache")
    items = artifacts(repos, work / "arts")
    seen = []

    def done(art, result, reused):
        seen.append(1)
        if len(seen) == 1 and on_first is not None:
            on_first()

    t0 = time.perf_counter()
    results = validate_all(items, Validator(Settings(jobs=slots)), executor=ex, on_done=done)
    return time.perf_counter() - t0, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=100, help="no-op units for the dispatch overhead")
    ap.add_argument("--slots", type=int, default=3, help="concurrency of both executors (3 Ray nodes)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        sys.exit("this benchmark needs the ray extra: pip install 'ssrkit[ray]'")
    from ssrkit.ray_executor import SLOT_RESOURCE, RayExecutor

    tmp = Path(tempfile.mkdtemp(prefix="ssrkit-exec-bench-"))
    out: dict = {"slots": args.slots, "units": args.units, "cpus": os.cpu_count()}
    try:
        repos = {p.name: p for p in materialize(ROOT / "examples" / "repos", tmp / "repos")}

        # -- local ------------------------------------------------------------------------------------
        with LocalExecutor(args.slots) as ex:
            out["local_dispatch_ms"], out["local_dispatch_ms_parallel"] = dispatch_ms(ex, args.units)
        with LocalExecutor(args.slots) as ex:
            out["local_validate_s"], local = timed_validation(ex, repos, tmp / "local", args.slots)

        # -- ray: 3 nodes, one slot each ------------------------------------------------------------------
        os.environ["SSRKIT_CACHE"] = str(tmp / "node-cache")  # the nodes' caches start empty
        node = dict(num_cpus=1, resources={SLOT_RESOURCE: 1}, object_store_memory=100 * 1024 * 1024)
        cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        workers = [cluster.add_node(**node) for _ in range(args.slots - 1)]
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
        try:
            with RayExecutor(args.slots) as ex:
                out["ray_dispatch_ms"], out["ray_dispatch_ms_parallel"] = dispatch_ms(ex, args.units)
            with RayExecutor(args.slots) as ex:
                out["ray_validate_s"], remote = timed_validation(ex, repos, tmp / "ray", args.slots)
                out["ray_nodes_used"] = len(ex.nodes_used)
            out["ray_same_verdicts"] = verdicts(remote) == verdicts(local)
            shutil.rmtree(tmp / "node-cache", ignore_errors=True)

            killed_at: list[float] = []

            def kill() -> None:
                def go() -> None:
                    cluster.remove_node(workers[-1], allow_graceful=False)
                    killed_at.append(time.perf_counter())
                threading.Thread(target=go, daemon=True).start()

            with RayExecutor(args.slots) as ex:
                t0 = time.perf_counter()
                wall, after_kill = timed_validation(ex, repos, tmp / "ray-kill", args.slots, on_first=kill)
                end = t0 + wall
            out["ray_killed_validate_s"] = wall
            out["ray_kill_extra_s"] = wall - out["ray_validate_s"]
            out["ray_kill_to_end_s"] = end - killed_at[0] if killed_at else None
            out["ray_killed_same_verdicts"] = verdicts(after_kill) == verdicts(local)
        finally:
            ray.shutdown()
            cluster.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    out["ratio_validate_ray_over_local"] = out["ray_validate_s"] / out["local_validate_s"]
    print(f"{'':28}{'local':>10}{'ray (3 nodes)':>16}")
    print(f"{'dispatch, one at a time':28}{out['local_dispatch_ms']:>8.2f}ms{out['ray_dispatch_ms']:>14.2f}ms")
    print(f"{'dispatch, ' + str(args.slots) + ' in flight':28}{out['local_dispatch_ms_parallel']:>8.2f}ms"
          f"{out['ray_dispatch_ms_parallel']:>14.2f}ms")
    print(f"{'validate ' + str(len(EXPECTED)) + ' examples':28}{out['local_validate_s']:>9.1f}s"
          f"{out['ray_validate_s']:>15.1f}s   ratio {out['ratio_validate_ray_over_local']:.2f}"
          f"   same verdicts: {out['ray_same_verdicts']}   nodes used: {out['ray_nodes_used']}")
    print(f"{'  with a node killed':28}{'':>10}{out['ray_killed_validate_s']:>15.1f}s   "
          f"+{out['ray_kill_extra_s']:.1f}s vs no kill   kill→end {out['ray_kill_to_end_s'] or 0:.1f}s   "
          f"same verdicts: {out['ray_killed_same_verdicts']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
