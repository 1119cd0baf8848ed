#!/usr/bin/env python3
"""What `--executor ray` costs against the local executor, on one machine.

Three numbers, each for the local executor (the thread pool of `--jobs`) and for Ray on a 3-node cluster
started here (`ray.cluster_utils.Cluster`, one sandbox slot per node):

* dispatch overhead per unit (ms): N no-op units, one at a time (submit → result), and N at once
  (the wall time / N at the same concurrency);
* the wall time of validating every example artifact (examples/artifacts, textkit and ledger) at equal
  concurrency (`--slots`, default 3), each run with fresh caches and a fresh cluster, the configurations
  interleaved `--repeat` times (medians reported); the ratio Ray / local (the target is
  at most 1.10 on one machine); and two controls that tell where a gap comes from: the local executor
  again while the 3-node cluster idles (what the cluster's daemons cost everything else on the machine),
  and Ray on one node holding all the slots (the same task path with a third of the daemons);
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

from ssrkit.store.artifact import Artifact  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402
from ssrkit.executor import Executor, LocalExecutor, run_units  # noqa: E402
from ssrkit.store.source import RepoSource  # noqa: E402
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
    items = artifacts(repos, work / "arts")
    seen = []

    def done(art, result, reused):
        seen.append(1)
        if len(seen) == 1 and on_first is not None:
            on_first()

    t0 = time.perf_counter()
    results = validate_all(items, Validator(Settings(jobs=slots)), executor=ex, on_done=done)
    return time.perf_counter() - t0, results


def start_cluster(nodes: int, slots_per_node: int):
    """`nodes` Ray nodes on this machine (the head included), `slots_per_node` sandbox slots each."""
    import ray
    from ray.cluster_utils import Cluster

    from ssrkit.executor.ray import SLOT_RESOURCE

    node = dict(num_cpus=slots_per_node, resources={SLOT_RESOURCE: slots_per_node},
                object_store_memory=100 * 1024 * 1024)
    cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
    workers = [cluster.add_node(**node) for _ in range(nodes - 1)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, logging_level="ERROR")
    return cluster, workers


def stop_cluster(cluster) -> None:
    import ray

    ray.shutdown()
    cluster.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=100, help="no-op units for the dispatch overhead")
    ap.add_argument("--slots", type=int, default=3, help="concurrency of both executors (3 Ray nodes)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="validation rounds; each round runs every configuration once, interleaved (the median "
                         "of each is reported, so load from other processes falls on all of them alike)")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args()
    try:
        import ray
        from ray.cluster_utils import Cluster  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs the ray extra: pip install 'ssrkit[ray]'")
    from ssrkit.executor.ray import RayExecutor

    tmp = Path(tempfile.mkdtemp(prefix="ssrkit-exec-bench-"))
    out: dict = {"slots": args.slots, "units": args.units, "cpus": os.cpu_count(), "repeat": args.repeat}
    walls: dict[str, list[float]] = {"local": [], "ray": [], "local_cluster_idle": [], "ray_1node": []}
    n = [0]

    def work() -> Path:
        """A fresh directory and fresh caches for one validation run. Ray's nodes take $SSRKIT_CACHE when
        they start, so a Ray run calls this before its cluster starts, and the cluster does one run."""
        n[0] += 1
        os.environ["SSRKIT_CACHE"] = str(tmp / f"cache-{n[0]}")
        return tmp / f"run-{n[0]}"

    try:
        repos = {p.name: p for p in materialize(ROOT / "examples" / "repos", tmp / "repos")}
        with LocalExecutor(args.slots) as ex:
            out["local_dispatch_ms"], out["local_dispatch_ms_parallel"] = dispatch_ms(ex, args.units)
        local = None
        for _ in range(args.repeat):
            # local, with no Ray process on the machine
            with LocalExecutor(args.slots) as ex:
                wall, local = timed_validation(ex, repos, work(), args.slots)
            walls["local"].append(wall)
            # ray: one sandbox slot on each of `slots` nodes; and local again while that cluster idles
            ray_work = work()
            cluster, workers = start_cluster(args.slots, 1)
            try:
                if "ray_dispatch_ms" not in out:
                    with RayExecutor(args.slots) as ex:
                        out["ray_dispatch_ms"], out["ray_dispatch_ms_parallel"] = dispatch_ms(ex, args.units)
                with RayExecutor(args.slots) as ex:
                    run_units(ex, noop, [(i,) for i in range(ex.window)])  # the workers are up
                    wall, remote = timed_validation(ex, repos, ray_work, args.slots)
                    out["ray_nodes_used"] = len(ex.nodes_used)
                walls["ray"].append(wall)
                out["ray_same_verdicts"] = out.get("ray_same_verdicts", True) and verdicts(remote) == verdicts(local)
                with LocalExecutor(args.slots) as ex:
                    walls["local_cluster_idle"].append(timed_validation(ex, repos, work(), args.slots)[0])
            finally:
                stop_cluster(cluster)
            # ray on one node with all the slots: the same scheduling, a third of the daemons
            ray_work = work()
            cluster, _ = start_cluster(1, args.slots)
            try:
                with RayExecutor(args.slots) as ex:
                    run_units(ex, noop, [(i,) for i in range(ex.window)])
                    walls["ray_1node"].append(timed_validation(ex, repos, ray_work, args.slots)[0])
            finally:
                stop_cluster(cluster)

        # recovery: a worker node killed (no grace) when the first artifact is done
        ray_work = work()
        cluster, workers = start_cluster(args.slots, 1)
        try:
            killed_at: list[float] = []
            detected_at: list[float] = []

            def kill() -> None:
                def go() -> None:
                    victim = workers[-1].node_id
                    cluster.remove_node(workers[-1], allow_graceful=False)
                    killed_at.append(time.perf_counter())
                    while not detected_at:  # Ray's own failure detection: until then its units wait
                        if not any(n["NodeID"] == victim and n["Alive"] for n in ray.nodes()):
                            detected_at.append(time.perf_counter())
                        time.sleep(0.1)
                threading.Thread(target=go, daemon=True).start()

            with RayExecutor(args.slots) as ex:
                run_units(ex, noop, [(i,) for i in range(ex.window)])
                t0 = time.perf_counter()
                wall, after_kill = timed_validation(ex, repos, ray_work, args.slots, on_first=kill)
                end = t0 + wall
        finally:
            stop_cluster(cluster)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    for k, v in walls.items():
        out[f"{k}_validate_s"] = statistics.median(v)
        out[f"{k}_validate_runs_s"] = v
    out["ratio_validate_ray_over_local"] = out["ray_validate_s"] / out["local_validate_s"]
    out["ratio_ray_1node_over_local"] = out["ray_1node_validate_s"] / out["local_validate_s"]
    out["ratio_local_cluster_idle_over_local"] = out["local_cluster_idle_validate_s"] / out["local_validate_s"]
    out["ray_killed_validate_s"] = wall
    out["ray_kill_extra_s"] = wall - out["ray_validate_s"]
    out["ray_kill_to_end_s"] = end - killed_at[0] if killed_at else None
    out["ray_kill_detected_s"] = detected_at[0] - killed_at[0] if detected_at and killed_at else None
    out["ray_killed_same_verdicts"] = verdicts(after_kill) == verdicts(local)

    def runs(key: str) -> str:
        return "(" + ", ".join(f"{w:.1f}" for w in walls[key]) + ")"

    print(f"{'':32}{'local':>10}{'ray (3 nodes)':>16}")
    print(f"{'dispatch, one at a time':32}{out['local_dispatch_ms']:>8.2f}ms{out['ray_dispatch_ms']:>14.2f}ms")
    print(f"{'dispatch, ' + str(args.slots) + ' in flight':32}{out['local_dispatch_ms_parallel']:>8.2f}ms"
          f"{out['ray_dispatch_ms_parallel']:>14.2f}ms")
    print(f"{'validate ' + str(len(EXPECTED)) + ' examples (median)':32}{out['local_validate_s']:>9.1f}s"
          f"{out['ray_validate_s']:>15.1f}s   ratio {out['ratio_validate_ray_over_local']:.2f}"
          f"   same verdicts: {out['ray_same_verdicts']}   nodes used: {out['ray_nodes_used']}")
    print(f"{'  each run':32}{runs('local')}   {runs('ray')}")
    print(f"{'  local, 3-node cluster idle':32}{out['local_cluster_idle_validate_s']:>9.1f}s{'':16}   ratio "
          f"{out['ratio_local_cluster_idle_over_local']:.2f} {runs('local_cluster_idle')}")
    print(f"{'  ray, 1 node x ' + str(args.slots) + ' slots':32}{'':10}{out['ray_1node_validate_s']:>15.1f}s   "
          f"ratio {out['ratio_ray_1node_over_local']:.2f} {runs('ray_1node')}")
    print(f"{'  with a node killed':32}{'':>10}{out['ray_killed_validate_s']:>15.1f}s   "
          f"{out['ray_kill_extra_s']:+.1f}s vs the median   kill→end {out['ray_kill_to_end_s'] or 0:.1f}s   "
          f"node death seen by Ray after {out['ray_kill_detected_s'] or 0:.1f}s   "
          f"same verdicts: {out['ray_killed_same_verdicts']}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
