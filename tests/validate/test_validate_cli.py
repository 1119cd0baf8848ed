"""`ssrkit validate` as a user runs it: exit codes, tables, --json, clear usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.cli import in_process
from fixtures.paths import EXAMPLES, SRC
from fixtures.repos import copy_artifact

VALID = "textkit/valid-slug-truncate-off-by-one"
INVALID = "textkit/invalid-bug_scope"


def ssrkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(SRC)}
    return subprocess.run([sys.executable, "-m", "ssrkit", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=600)


@pytest.fixture
def run(capsys):
    """`ssrkit ARGS` in this process (its tables unwrapped: no COLUMNS, tests/conftest.py)."""
    return lambda *args: in_process(capsys, *args)


def test_valid_artifact_exit_0_and_table(tmp_path, example_repos, run):
    art = copy_artifact(EXAMPLES / "artifacts" / VALID, tmp_path / "a")
    res = run("validate", str(art), "--repo", str(example_repos["textkit"]))
    assert res.returncode == 0, res.stdout + res.stderr
    for name in ("files", "applies", "bug_breaks", "inverse_mutation"):
        assert name in res.stdout
    assert "valid" in res.stdout and "Traceback" not in res.stderr
    assert (art / "validation.json").is_file() and (art / "logs" / "original.log").is_file()


def test_a_verdict_read_from_an_up_to_date_validation_json_says_so(tmp_path, example_repos, run):
    art = copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "a")
    first = run("validate", str(art), "--repo", str(example_repos["textkit"]))
    again = run("validate", str(art), "--repo", str(example_repos["textkit"]))
    redo = run("validate", str(art), "--repo", str(example_repos["textkit"]), "--redo")
    assert (first.returncode, again.returncode, redo.returncode) == (1, 1, 1)
    assert "read from validation.json" not in first.stdout + redo.stdout
    assert "1 of 1 verdict(s) read from validation.json" in again.stdout and "--redo validates again" in again.stdout


def test_a_verdict_made_in_another_environment_is_not_reused(tmp_path, example_repos, monkeypatch):
    """validation.json is reused only under the environment it was made in: a virtualenv activated since
    (here: another VIRTUAL_ENV, which the sandbox passes on) validates again."""
    art = copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "a")
    first = ssrkit("validate", str(art), "--repo", str(example_repos["textkit"]))
    venv = tmp_path / "venv"
    venv.mkdir()
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    other = ssrkit("validate", str(art), "--repo", str(example_repos["textkit"]))
    same = ssrkit("validate", str(art), "--repo", str(example_repos["textkit"]))
    assert (first.returncode, other.returncode, same.returncode) == (1, 1, 1)
    assert "read from validation.json" not in other.stdout
    assert "1 of 1 verdict(s) read from validation.json" in same.stdout


def test_invalid_artifact_exit_1_names_the_check(tmp_path, example_repos, run):
    art = copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "a")
    res = run("validate", str(art), "--repo", str(example_repos["textkit"]))
    assert res.returncode == 1
    assert "invalid" in res.stdout and "bug_scope" in res.stdout and "conftest.py" in res.stdout


def test_json_for_many_artifacts(tmp_path, example_repos, run):
    a = copy_artifact(EXAMPLES / "artifacts" / VALID, tmp_path / "arts" / "a")
    b = copy_artifact(EXAMPLES / "artifacts" / INVALID, tmp_path / "arts" / "b")
    res = run("validate", str(tmp_path / "arts"), "--repo", str(example_repos["textkit"]), "--json", "-j", "2")
    assert res.returncode == 1
    data = json.loads(res.stdout)
    assert [Path(d["artifact"]).name for d in data] == ["a", "b"]
    assert [d["valid"] for d in data] == [True, False]
    assert {c["name"] for c in data[0]["checks"]} >= {"parser", "weaken_hides"}
    # a second run reuses the up-to-date validation.json
    again = run("validate", str(a), "--repo", str(example_repos["textkit"]), "--json")
    assert json.loads(again.stdout)[0]["created"] == data[0]["created"]
    assert b.exists()


def test_usage_errors_exit_2_without_traceback(tmp_path, example_repos):
    art = copy_artifact(EXAMPLES / "artifacts" / VALID, tmp_path / "a")
    cases = [
        (["validate", str(art)], "--repo"),  # hand-written artifact, no repository given
        (["validate", str(tmp_path / "nope"), "--repo", str(example_repos["textkit"])], "no such artifact"),
        (["validate", str(art), "--repo", str(tmp_path / "missing-repo")], "does not exist"),
        (["validate", str(art), "--repo", str(example_repos["textkit"]), "--image", "x"], "not both"),
        (["validate", str(art), "--repo", str(example_repos["textkit"]), "--total-break", "maybe"], "total_break"),
    ]
    for args, fragment in cases:
        res = ssrkit(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert fragment in res.stderr, (args, res.stderr)
        assert "Traceback" not in res.stderr


def test_sigterm_with_jobs_stops_every_worker_and_leaves_nothing(tmp_path, example_repos):
    """`kill` of a `--jobs 2` validation while both workers run tests (issue 31): the signal reaches the main
    thread only; every sandbox must still go (the workers' too), at once, and the command say so."""
    import glob
    import signal
    import time

    from ssrkit.sandbox._cgroup import parent_dir
    from ssrkit.sandbox.local import _tmp_root

    arts = tmp_path / "arts"
    for name in ("one", "two"):
        art = copy_artifact(EXAMPLES / "artifacts" / VALID, arts / name)
        (art / "test_script.sh").write_text("#!/usr/bin/env bash\nsleep 67\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "ssrkit", "validate", str(arts), "--repo",
                             str(example_repos["textkit"]), "--jobs", "2", "--no-cache"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    mine = f"{_tmp_root()}/ssrkit-{proc.pid}-*"
    deadline = time.monotonic() + 120
    while len(_sleeping(proc.pid)) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert len(_sleeping(proc.pid)) == 2, "both workers' tests should be running"
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "interrupted" in err, (proc.returncode, err[-2000:])
    assert time.monotonic() - t0 < 20  # not the tests' 67 s
    assert "Traceback" not in err
    assert not glob.glob(mine), "the sandboxes' directories are left"
    with open("/proc/self/mountinfo") as fh:
        assert f"/ssrkit-{proc.pid}-" not in fh.read(), "an overlay mount is left"
    parents = {parent_dir(c) for c in ("pids", "memory")} - {None}
    assert not [g for d in parents for g in glob.glob(f"{d}/ssrkit-{proc.pid}-*")], "a cgroup is left"
    assert not _sleeping(proc.pid)
    assert not (arts / "one" / "validation.json").exists()  # no verdict of a killed run


def _sleeping(pid: int) -> list[int]:
    """The `sleep 67` of the test scripts the ssrkit process `pid` started (by their environment's token)."""
    out = []
    for d in glob_procs():
        try:
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                if fh.read() != b"sleep\x0067\x00":
                    continue
            with open(f"/proc/{d}/environ", "rb") as fh:
                if f"/ssrkit-{pid}-".encode() in fh.read():
                    out.append(d)
        except OSError:
            continue
    return out


def glob_procs() -> list[int]:
    return [int(n) for n in os.listdir("/proc") if n.isdigit()]
