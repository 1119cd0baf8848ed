"""`--executor ray` on a real 3-node Ray cluster (one machine): the same verdicts and files as the local
executor, units on more than one node, nothing lost when a worker node is killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fixtures.cluster import sample_items, verdict
from fixtures.solving import TouchTheBuggyFile, copy_validated
from fixtures.paths import SRC
from fixtures.raycluster import node_args
from fixtures.sandboxes import SUITE_ENV
from ssrkit.executor import LocalExecutor
from ssrkit.validate import Settings, Validator, validate_all

pytest.importorskip("ray")

from ssrkit.executor.ray import RayExecutor  # noqa: E402


@pytest.fixture(scope="module")
def local_verdicts(example_repos, tmp_path_factory) -> list[tuple]:
    """The SAMPLE validated by the local executor, once for the tests that compare Ray's verdicts with it."""
    with LocalExecutor(2) as ex:
        local = validate_all(sample_items(example_repos, tmp_path_factory.mktemp("local")),
                             Validator(Settings(jobs=2)), executor=ex)
    return [verdict(r) for r in local]


def test_validate_same_verdicts_as_local_on_several_nodes(ray_cluster, example_repos, local_verdicts, tmp_path):
    ray_items = sample_items(example_repos, tmp_path / "ray")
    with RayExecutor(3) as ex:
        remote = validate_all(ray_items, Validator(Settings(jobs=2)), executor=ex)
        used = dict(ex.nodes_used)
    assert [verdict(r) for r in remote] == local_verdicts
    assert len(used) > 1, used
    # the driver wrote the files, naming the driver's paths (not a node's scratch copy)
    for (art, source), r in zip(ray_items, remote):
        saved = json.loads((art.path / "validation.json").read_text())
        assert saved["artifact"] == str(art.path) and r["artifact"] == str(art.path)
        assert saved["source"] == source.to_dict()
        assert "ssrkit-unit-" not in json.dumps(saved)
        for run in saved["runs"].values():
            assert (art.path / run["log"]).is_file()
    # a re-run reuses every up-to-date validation.json: no unit is sent
    with RayExecutor(3) as ex:
        again = validate_all(ray_items, Validator(Settings(jobs=2)), executor=ex)
        assert sum(ex.nodes_used.values()) == 0
    assert [verdict(r) for r in again] == [verdict(r) for r in remote]


def test_solve_repair_same_attempts_as_local(ray_cluster, example_repos, tmp_path):
    from ssrkit.solve import Engine, SolveOptions
    from ssrkit.solve.solvers import make_solver

    names = ["textkit/valid-slug-truncate-off-by-one", "ledger/valid-journal-as-of-boundary"]
    # validated once (the executor of solve does not touch it); each executor solves its own copies
    parents = sample_items(example_repos, tmp_path / "parents", names)
    validate_all(parents, Validator(Settings(jobs=2)))
    out = {}
    for label, ex in (("local", LocalExecutor(2)), ("ray", RayExecutor(2))):
        items = [(copy_validated(a, tmp_path / label / a.path.name), source) for a, source in parents]
        assert all(a.is_valid for a, _ in items)
        with ex:
            engine = Engine(SolveOptions(jobs=2))
            records = engine.solve(items, make_solver("repair"), attempts=2, executor=ex)
            regraded = engine.regrade(items, executor=ex)  # the saved fixes, graded again where they run
        assert sorted((r["attempt"], r["passed"]) for r in regraded) == sorted((r["attempt"], r["passed"]) for r in records)
        assert all(r["solver_info"].get("regraded") for r in regraded)
        out[label] = (items, records)
    (l_items, local), (r_items, remote) = out["local"], out["ray"]
    key = lambda r: (Path(r["artifact"]).name, r["attempt"], r["passed"], r["reason"], r["tests"])  # noqa: E731
    assert sorted(map(key, remote)) == sorted(map(key, local))
    for (la, _), (ra, _) in zip(l_items, r_items):
        for d in la.attempt_dirs():
            rd = ra.path / "attempts" / d.name
            assert (rd / "fix.diff").read_text() == (d / "fix.diff").read_text()
            rec = json.loads((rd / "eval.json").read_text())
            assert rec["artifact"] == str(ra.path) and rec["passed"] == json.loads((d / "eval.json").read_text())["passed"]
            assert (rd / "test_output.log").is_file()
        from ssrkit.store.attempts import scored_attempts

        # written here from what the node sent: bound to this artifact's files and fix.diff, so rewarded
        assert [s.source for s in scored_attempts(ra)] == ["eval.json"] * len(la.attempt_dirs())


def test_higher_order_same_as_local(ray_cluster, example_repos, tmp_path):
    from ssrkit.sandbox import SandboxOptions
    from ssrkit.solve import Engine, SolveOptions
    from ssrkit.solve.grade import GradeSettings
    from ssrkit.solve.higher_order import make_all

    names = ["textkit/valid-two-files-acronym-and-default-filter", "ledger/valid-amortization-partial-weaken"]
    # one set of solved parents (validated and solved here, as the executor does not touch either step): both
    # executors stack the same failed fixes, so any difference is the executor's
    items = sample_items(example_repos, tmp_path / "parents", names)
    validate_all(items, Validator(Settings(jobs=2)))
    Engine(SolveOptions(jobs=2)).solve(items, TouchTheBuggyFile(), attempts=1)
    made = {}
    for label, ex in (("local", LocalExecutor(2)), ("ray", RayExecutor(2))):
        with ex:
            outcomes = make_all(items, tmp_path / label / "higher", settings=GradeSettings(), executor=ex,
                                sandbox=("auto", SandboxOptions()))
        made[label] = sorted((Path(o.parent).name, o.attempt, o.status, o.id) for o in outcomes)
    assert made["ray"] == made["local"]
    ids = [i for *_, i in made["ray"] if i]
    assert len(ids) == len(names), made["ray"]  # each parent's failed fix became a higher-order bug, both ways
    for i in ids:
        assert (tmp_path / "ray" / "higher" / i / "bug_inject.diff").read_text() == \
               (tmp_path / "local" / "higher" / i / "bug_inject.diff").read_text()
        assert "an attempt that fixes nothing" in (tmp_path / "ray" / "higher" / i / "bug_inject.diff").read_text()


def test_worker_node_killed_mid_run_loses_nothing(ray_cluster, example_repos, local_verdicts, tmp_path):
    cluster, workers = ray_cluster
    items = sample_items(example_repos, tmp_path / "ray")
    done: list[int] = []
    killed = threading.Event()

    def kill_when_running():
        while not done and not killed.is_set():
            time.sleep(0.1)
        cluster.remove_node(workers[-1], allow_graceful=False)  # a worker node dies with units on it
        killed.set()

    with RayExecutor(3) as ex:
        t = threading.Thread(target=kill_when_running, daemon=True)
        t.start()
        remote = validate_all(items, Validator(Settings(jobs=2)), executor=ex,
                              on_done=lambda a, r, reused: done.append(1))
        t.join(60)
    assert killed.is_set()
    assert [verdict(r) for r in remote] == local_verdicts
    for art, _ in items:
        assert (art.path / "validation.json").is_file()
    workers[-1] = cluster.add_node(**node_args())  # for whichever test comes next


def _sandboxes_of_run(run: str) -> list[Path]:
    """The local sandboxes labelled with `run`, wherever (whichever process, node) they are."""
    from ssrkit.sandbox.local import LABEL, _tmp_root

    out = []
    for root in {Path(_tmp_root()), Path(os.environ.get("TMPDIR", "/tmp"))}:
        for label in root.glob(f"ssrkit-*/sb-*/{LABEL}"):
            try:
                if json.loads(label.read_text()).get("run") == run:
                    out.append(label.parent)
            except (OSError, ValueError):
                pass  # being removed as we look
    return out


def ctrl_c_reaches_it() -> None:
    """In the child before exec: SIGINT as a terminal's Ctrl-C finds it. A suite started in the background of
    a shell without job control inherits SIGINT ignored, and Python keeps an ignored SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupted_run(cluster_address: str, items_dir: Path, run: str) -> subprocess.CompletedProcess:
    """`ssrkit validate --executor ray` as a subprocess, sent SIGINT once its units have sandboxes open."""
    env = {**os.environ, "PYTHONPATH": str(SRC),
           "RAY_ADDRESS": cluster_address, "SSRKIT_RUN": run}
    proc = subprocess.Popen([sys.executable, "-m", "ssrkit", "validate", str(items_dir), "--executor", "ray",
                             "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(_sandboxes_of_run(run)) < 2 and proc.poll() is None:
        time.sleep(0.05)  # wait until units run on two nodes at least, with their sandboxes open
    assert _sandboxes_of_run(run), "no unit started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_ctrl_c_leaves_no_task_and_no_sandbox(ray_cluster, example_repos, tmp_path):
    """Ctrl-C on the driver: the local executor's "interrupted" line and exit code, every Ray task of the run
    gone (all slots free) and no sandbox of the run left on any node, as soon as the driver has exited."""
    import ray

    from ssrkit.executor.ray import SLOT_RESOURCE

    cluster, _ = ray_cluster
    items = sample_items(example_repos, tmp_path / "arts", record_repo=True)
    run = f"test-ctrl-c-{os.getpid()}"
    res = _interrupted_run(cluster.address, tmp_path / "arts", run)
    assert res.returncode == 130, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1] == "interrupted", res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    # nothing to wait for: the driver waited for its cancelled tasks and its reapers before exiting
    assert _sandboxes_of_run(run) == []
    total = ray.cluster_resources()[SLOT_RESOURCE]
    deadline = time.monotonic() + 10  # the raylets' view of freed slots lags by a heartbeat or two
    while time.monotonic() < deadline and ray.available_resources().get(SLOT_RESOURCE, 0) != total:
        time.sleep(0.2)
    assert ray.available_resources().get(SLOT_RESOURCE, 0) == total
    assert sum((a.path / "validation.json").is_file() for a, _ in items) < len(items)  # it was interrupted
    # the same Ctrl-C under the local executor prints the same thing
    env = {**os.environ, "PYTHONPATH": str(SRC), "SSRKIT_RUN": run + "-l"}
    proc = subprocess.Popen([sys.executable, "-m", "ssrkit", "validate", str(tmp_path / "arts"), "--json",
                             "--jobs", "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _sandboxes_of_run(run + "-l") and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == res.returncode
    assert err.strip().splitlines()[-1] == res.stderr.strip().splitlines()[-1]
    assert _sandboxes_of_run(run + "-l") == []


def test_window_queues_units_but_never_runs_more_than_the_slots(ray_cluster):
    """Ray keeps twice the cluster's slots submitted (the extra ones queued on the nodes), yet no more
    units run at once than there are slots; under --jobs below the slots, --jobs caps both."""
    from ssrkit.executor import run_units

    def held(i: int) -> tuple[float, float]:
        import time

        t0 = time.time()
        time.sleep(0.6)
        return t0, time.time()

    def most_at_once(spans: list[tuple[float, float]]) -> int:
        edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans], key=lambda x: (x[0], x[1]))
        now = top = 0
        for _, d in edges:
            now += d
            top = max(top, now)
        return top

    with RayExecutor(3) as ex:
        assert (ex.slots, ex.window) == (3, 6)
        spans = run_units(ex, held, [(i,) for i in range(9)])
    assert len(spans) == 9 and 2 <= most_at_once(spans) <= 3
    with RayExecutor(2) as ex:
        assert (ex.slots, ex.window) == (2, 2)
        assert most_at_once(run_units(ex, held, [(i,) for i in range(4)])) <= 2


def test_procedural_inject_same_artifacts_as_local(ray_cluster, example_repos, tmp_path):
    """Each candidate a Ray task on some node: the driver keeps the same artifacts, byte for byte, as the
    local executor for the same seed (the combine stream reads what the nodes sent back)."""
    from ssrkit.store.artifact import CORE_FILES
    from ssrkit.inject.procedural import inject
    from ssrkit.sandbox import SandboxOptions

    repo = example_repos["textkit"]
    options = SandboxOptions(env=dict(SUITE_ENV))  # Ray's workers are processes of their own: no conftest patch
    runs = {}
    for label, ex in (("local", LocalExecutor(2)), ("ray", RayExecutor(3))):
        with ex:
            runs[label] = inject(repo, tmp_path / label, n=3, seed=4, strategies="expression,removal,combine",
                                 backend="local", options=options, executor=ex)
            if label == "ray":
                assert len(ex.nodes_used) > 1, ex.nodes_used
    local, remote = runs["local"], runs["ray"]
    assert [a.id for a in remote.artifacts] == [a.id for a in local.artifacts] and len(local.artifacts) == 3
    assert [a.strategy for a in remote.artifacts] == ["expression", "removal", "combine"]
    for a, b in zip(local.artifacts, remote.artifacts):
        for name in CORE_FILES:
            assert (a.path / name).read_bytes() == (b.path / name).read_bytes()
        v = json.loads((b.path / "validation.json").read_text())
        assert v["valid"] and v["artifact"] == str(b.path) and v["source"] == {"kind": "local", "path": str(repo)}
        assert "ssrkit-unit-" not in (b.path / "artifact.toml").read_text() + json.dumps(v)
    assert not (tmp_path / "ray" / ".staging").exists()
    summary = json.loads((tmp_path / "ray" / "inject.json").read_text())
    assert [a["id"] for a in summary["artifacts"]] == [a.id for a in local.artifacts]
