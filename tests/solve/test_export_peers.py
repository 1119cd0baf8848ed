"""Exports checked by the peers' own code: SWE-bench's check_task_repo and grading, Harbor's test.sh contract.

Every valid example artifact (textkit: pytest; ledger: unittest, one run by pytest) is validated,
exported as a SWE-bench v5 task repository and as Harbor tasks. Then, on a clone of each task's `repo.bundle`
(what the task's Dockerfile puts at /testbed):

* SWE-bench: the eval script SWE-bench itself makes from `eval.sh` (`make_test_spec`) runs after the oracle
  patch (`gold.patch`) or no patch; `get_eval_report` on the saved log must say resolved / not resolved;
* Harbor: `tests/test.sh` runs after a fix made by an ssrkit solver; its reward must be ssrkit solve's verdict.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.git import git
from fixtures.paths import EXAMPLES
from fixtures.solving import VALID_EXAMPLES, ScriptedSolver, copy_validated, make_engine
from ssrkit.runs import export as core
from ssrkit.store.artifact import Artifact
from ssrkit.errors import SsrkitError
from ssrkit.solve.solvers import make_solver
from ssrkit.store.source import RepoSource

#: every valid example artifact (pytest and unittest runners, a removed module, a total break, a partial weakening)
NAMES = VALID_EXAMPLES
SPACED = "textkit/valid-two-files-acronym-and-default-filter"
#: Harbor's verdict is compared with ssrkit solve's on one artifact of each runner
HARBOR = [SPACED, "ledger/valid-journal-as-of-boundary"]
#: the artifacts' test scripts call `python`, which must have pytest
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
#: under xdist (`make test`), one worker runs them all: the task images have fixed names (one per instance), and
#: eval.sh on the host writes its scripts to the fixed /tmp/ssrkit-eval
pytestmark = pytest.mark.xdist_group("docker-task")


@pytest.fixture(scope="module")
def exported(tmp_path_factory, example_repos, validated_examples):
    """(tasks by artifact name, the SWE-bench task repository, the Harbor tasks directory)."""
    tmp = tmp_path_factory.mktemp("export")
    tasks = {}
    for name in NAMES:
        validated, result = validated_examples[name]
        assert result["valid"], [c for c in result["checks"] if c["status"] == "failed"]
        art = copy_validated(validated, tmp / "arts" / name.replace("/", "-"))
        source = RepoSource.local(example_repos[name.split("/")[0]])
        tasks[name] = (art, source, core.make_task(art, source))
    task_repo, harbor = tmp / "swebench", tmp / "harbor"
    core.write_swebench_repo([t for _, _, t in tasks.values()], task_repo)
    for _, _, t in tasks.values():
        core.write_harbor_task(t, harbor)
    return tasks, task_repo, harbor


def clone_snapshot(bundle: Path, dest: Path) -> Path:
    """What the task Dockerfile does: the snapshot cloned from the bundle."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    git(dest.parent, "clone", "-q", str(bundle), str(dest))
    git(dest, "remote", "remove", "origin")
    return dest


def git_apply(work: Path, diff: str) -> None:
    if diff.strip():
        git(work, "apply", "--binary", "-", input=diff)


# -- SWE-bench ------------------------------------------------------------------------------------

def test_check_task_repo_finds_no_problem(exported):
    checks = pytest.importorskip("swebench.task.checks")
    _, task_repo, _ = exported
    assert checks.check_task_repo(task_repo) == []
    repo_mod = pytest.importorskip("swebench.task.repo")
    loaded = {i["instance_id"]: i for i in repo_mod.load_task_repo(task_repo)}
    assert len(loaded) == len(NAMES)
    for art, _, task in exported[0].values():
        inst = loaded[task.instance_id]
        assert inst["FAIL_TO_PASS"] == art.validation["fail_to_pass"]
        assert inst["PASS_TO_PASS"] == art.validation["pass_to_pass"]
        assert inst["image"] == checks.expected_image(task.instance_id)
        assert inst["base_commit"] == task.base_commit and inst["repo"].startswith("ssrkit/")


def grade_state(work: Path) -> Path:
    """The grader's state directory of one run on the host: its own, never the task's default /tmp/ssrkit-grade,
    which another test run on this machine may be grading in."""
    return work.parent / f"{work.name}-grade-state"


def run_swebench(task_dir: Path, patch: str, work: Path, env: dict[str, str] | None = None) -> dict:
    """The harness's steps on a work tree: model patch applied, its eval script run, the log graded."""
    repo_mod = pytest.importorskip("swebench.task.repo")
    utils = pytest.importorskip("swebench.harness.utils")
    grading = pytest.importorskip("swebench.harness.grading")
    inst = repo_mod.load_task(task_dir)
    spec = utils.make_test_spec(inst)
    clone_snapshot(task_dir / core.BUNDLE, work)
    git_apply(work, patch)
    script = work.parent / f"{work.name}-eval.sh"
    script.write_text(spec.eval_script)
    # one stream, as the harness's exec_run gives it: the markers are `set -x` traces on stderr
    proc = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env={**ENV, "SSRKIT_WORKDIR": str(work), "SSRKIT_GRADE_STATE": str(grade_state(work)),
                               **(env or {})}, timeout=300)
    log = work.parent / f"{work.name}-test_output.txt"
    log.write_text(proc.stdout)
    pred = {"instance_id": inst["instance_id"], "model_patch": patch, "model_name_or_path": "ssrkit"}
    report = grading.get_eval_report(spec, pred, str(log), include_tests_status=True)[inst["instance_id"]]
    report["log"] = log.read_text()
    return report


@pytest.mark.parametrize("name", NAMES)
def test_swebench_grades_oracle_resolved_and_null_unresolved(exported, name, tmp_path):
    _, task_repo, _ = exported
    task = exported[0][name][2]
    task_dir = task_repo / "tasks" / task.instance_id
    oracle = run_swebench(task_dir, (task_dir / "gold.patch").read_text(), tmp_path / "oracle")
    assert oracle["resolved"], oracle["log"][-3000:]
    assert (grade_state(tmp_path / "oracle") / "test.log").is_file()  # eval.sh honours SSRKIT_GRADE_STATE
    status = oracle["tests_status"]
    assert len(status["FAIL_TO_PASS"]["success"]) == len(task.fail_to_pass)
    assert len(status["PASS_TO_PASS"]["success"]) == len(task.pass_to_pass)
    null = run_swebench(task_dir, "", tmp_path / "null")
    assert not null["resolved"]
    assert sorted(null["tests_status"]["FAIL_TO_PASS"]["failure"]) == sorted(task.fail_to_pass)


def test_ids_with_spaces_round_trip_through_swebench(exported, tmp_path):
    """SWE-bench's pytest parser cuts `test_x[hello world-...]` at the space; the exported lines do not."""
    python = pytest.importorskip("swebench.harness.log_parsers.python")
    parsers = pytest.importorskip("swebench.harness.log_parsers")
    _, task_repo, _ = exported
    task = exported[0][SPACED][2]
    spaced = [t for t in task.pass_to_pass if " " in t]
    assert spaced, "the example needs parametrized ids with spaces"
    report = run_swebench(task_repo / "tasks" / task.instance_id, task.patch, tmp_path / "w")
    region = report["log"].split(core.START_MARKER)[1].split(core.END_MARKER)[0]
    statuses = parsers.PARSER_REGISTRY[core.LOG_PARSER](region, None)
    assert all(statuses[t] == "PASSED" for t in spaced)
    # the raw pytest log, parsed by SWE-bench's pytest parser, loses them (the issue this format avoids)
    raw = "\n".join(line[2:] for line in report["log"].splitlines() if line.startswith("| "))
    assert not any(t in python.parse_log_pytest(raw, None) for t in spaced)


def test_jsonl_instances_make_swebench_test_specs(exported):
    utils = pytest.importorskip("swebench.harness.utils")
    for art, _, task in exported[0].values():
        inst = json.loads(json.dumps(core.swebench_instance(task)))
        spec = utils.make_test_spec(inst)
        assert spec.FAIL_TO_PASS == art.validation["fail_to_pass"] and spec.log_parser == core.LOG_PARSER
        assert spec.image == task.image and core.START_MARKER in spec.eval_script
        assert inst["repo"] == f"ssrkit/{task.repo_name}" and inst["repo_path"] == task.source.path


# -- Harbor ---------------------------------------------------------------------------------------

def harbor_reward(task_dir: Path, fix: str, work: Path, *, env: dict[str, str] | None = None,
                  wrap: list[str] | None = None, timeout: float = 600) -> tuple[float, dict]:
    """Harbor's verifier on a clone of the snapshot with `fix` applied: (reward.txt, ssrkit_eval.json).
    `env` adds to the verifier's environment; `wrap` is a command line around `bash test.sh`."""
    clone_snapshot(task_dir / "environment" / core.BUNDLE, work)
    git_apply(work, fix)
    logs = work.parent / f"{work.name}-logs"
    subprocess.run([*(wrap or []), "bash", str(task_dir / "tests" / "test.sh")], capture_output=True, text=True,
                   timeout=timeout, env={**ENV, "SSRKIT_WORKDIR": str(work), "SSRKIT_VERIFIER_LOGS": str(logs),
                                     "SSRKIT_GRADE_STATE": str(grade_state(work)), **(env or {})})
    reward = float((logs / "reward.txt").read_text())
    assert json.loads((logs / "reward.json").read_text()) == {"reward": reward}  # Harbor reads this one first
    return reward, json.loads((logs / "ssrkit_eval.json").read_text())


def harbor_layout_ok(task_dir: Path) -> None:
    import tomllib

    meta = tomllib.loads((task_dir / "task.toml").read_text())
    assert meta["version"] == "1.0" and meta["verifier"]["timeout_sec"] > 0 and meta["agent"]["timeout_sec"] > 0
    assert (task_dir / "instruction.md").read_text().startswith("I am improving the test suite")
    assert (task_dir / "environment" / "Dockerfile").read_text().startswith("FROM ")
    assert os.access(task_dir / "tests" / "test.sh", os.X_OK)


def solve_and_fix(art: Artifact, source: RepoSource, solver, tmp_path: Path) -> tuple[dict, str]:
    copy = Artifact(shutil.copytree(art.path, tmp_path / "art"))
    [rec] = make_engine().solve([(copy, source)], solver, attempts=1)
    return rec, (copy.path / "attempts" / "001" / "fix.diff").read_text()


@pytest.mark.parametrize("solver", ["oracle", "null"])
@pytest.mark.parametrize("name", HARBOR)
def test_harbor_verdict_is_ssrkit_solves(exported, name, solver, tmp_path):
    art, source, task = exported[0][name]
    task_dir = exported[2] / task.instance_id
    harbor_layout_ok(task_dir)
    rec, fix = solve_and_fix(art, source, make_solver(solver), tmp_path)
    reward, verdict = harbor_reward(task_dir, fix, tmp_path / "w")
    assert reward == (1.0 if rec["passed"] else 0.0) and rec["passed"] == (solver == "oracle")
    assert verdict["reason"] == rec["reason"]
    if solver == "oracle":
        assert verdict["canary"]["status"] == rec["canary"]["status"] == "caught"


def test_harbor_restores_protected_files_and_drops_shadowing_modules(exported, tmp_path):
    """The oracle's code plus a conftest.py and a json.py that would break the run: both graders delete them."""
    art, source, task = exported[0][SPACED]
    originals = {p: (Path(source.path) / p).read_text() for p in ("src/textkit/case.py", "src/textkit/template.py")}
    hostile = {**originals, "conftest.py": "raise SystemExit(3)\n", "json.py": "raise SystemExit(4)\n",
               "tests/test_case.py": "def test_nothing():\n    pass\n"}
    rec, fix = solve_and_fix(art, source, ScriptedSolver(hostile), tmp_path)
    assert rec["passed"], rec["reason"]
    reward, verdict = harbor_reward(exported[2] / task.instance_id, fix, tmp_path / "w")
    assert reward == 1.0, verdict["reason"]
    assert sorted(verdict["deleted"]) == sorted(rec["deleted"]) == ["conftest.py", "json.py"]
    assert sorted(verdict["restored"]) == sorted(rec["restored"])


FORGE = '''
import _pytest.reports as _reports

_original = _reports.TestReport.from_item_and_call.__func__


def _forged(cls, item, call):
    report = _original(cls, item, call)
    report.outcome = "passed"
    return report


_reports.TestReport.from_item_and_call = classmethod(_forged)
'''


def test_harbor_canary_catches_a_forged_runner_as_ssrkit_does(exported, tmp_path):
    """A fix that makes pytest report every test as passed (no bug fixed): the canary fails it in both."""
    art, source, task = exported[0][SPACED]
    init = "src/textkit/__init__.py"
    rec, fix = solve_and_fix(art, source, ScriptedSolver({init: lambda text: text + FORGE}), tmp_path)
    assert not rec["passed"] and rec["canary"]["status"] == "forged", rec["reason"]
    reward, verdict = harbor_reward(exported[2] / task.instance_id, fix, tmp_path / "w")
    assert reward == 0.0 and verdict["canary"]["status"] == "forged" and verdict["reason"] == rec["reason"]


# -- an agent that was root in the verifier's container (issue 26) ----------------------------------

AGENT_CODE = """#!/bin/sh
# the agent's code, run by git: says it ran, then rewrites the reward once the verifier is done
echo "$0" >> {marker}
(sleep 1; echo 1 > {logs}/reward.txt; echo '{{"reward": 1}}' > {logs}/reward.json) >/dev/null 2>&1 &
exit 1
"""


def agent_home(tmp_path: Path, logs: Path) -> tuple[Path, Path]:
    """A HOME as an agent that fixed nothing may leave it: ~/.gitconfig naming an fsmonitor and a hooks
    directory whose code rewrites the reward after the verifier; (HOME, the file its code appends to)."""
    home, marker = tmp_path / "agent-home", tmp_path / "agent-code-ran"
    hooks = home / "hooks"
    hooks.mkdir(parents=True)
    for name in ("fsmonitor", "reference-transaction", "post-checkout", "post-index-change", "pre-auto-gc"):
        (hooks / name).write_text(AGENT_CODE.format(marker=marker, logs=logs))
        (hooks / name).chmod(0o755)
    (home / ".gitconfig").write_text(f"[core]\n\tfsmonitor = {hooks / 'fsmonitor'}\n\thooksPath = {hooks}\n")
    return home, marker


@pytest.mark.parametrize("name", HARBOR)
def test_harbor_runs_none_of_the_agents_git_configuration(exported, name, tmp_path):
    """An agent that fixed nothing, set core.fsmonitor and core.hooksPath in ~/.gitconfig to code that rewrites
    the reward once the verifier is done, and wrote reward.json itself (Harbor reads it before reward.txt):
    the verifier's git runs none of it, and both reward files say 0."""
    task = exported[0][name][2]
    logs = tmp_path / "w-logs"
    home, marker = agent_home(tmp_path, logs)
    logs.mkdir()
    (logs / "reward.json").write_text('{"reward": 1}\n')
    reward, verdict = harbor_reward(exported[2] / task.instance_id, "", tmp_path / "w", env={"HOME": str(home)})
    time.sleep(1.5)  # what the agent's code started would have rewritten the reward by now
    assert not marker.exists(), f"git ran the agent's code: {marker.read_text()}"
    assert reward == 0.0 and not verdict["passed"]
    assert (logs / "reward.txt").read_text() == "0\n" and json.loads((logs / "reward.json").read_text()) == {"reward": 0}


#: an agent's process left running: whenever there is a reward, it makes it 1
REWRITER = ("while :; do if [ -s {logs}/reward.txt ]; then echo 1 > {logs}/reward.txt; "
            "echo '{{\"reward\": 1}}' > {logs}/reward.json; fi; sleep 0.05; done")


@pytest.mark.parametrize("name", HARBOR)
def test_harbor_writes_the_reward_after_the_agents_processes_are_gone(exported, name, tmp_path):
    """The task's container, as a pid namespace whose pid 1 stays up after the verifier (as Harbor's does, until
    it has read the reward) and the variable the task image sets: a process the agent left (setsid, reparented
    to pid 1) that rewrites any reward to 1 is killed before the reward is written."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("bubblewrap (bwrap) makes the container's pid namespace; apt-get install bubblewrap")
    task = exported[0][name][2]
    logs = tmp_path / "w-logs"
    agent = f"(setsid sh -c {shlex.quote(REWRITER.format(logs=logs))} >/dev/null 2>&1 &); sleep 0.2"
    wrap = [bwrap, "--unshare-pid", "--dev-bind", "/", "/", "--proc", "/proc", "--die-with-parent", "sh", "-c",
            f'{agent}; "$@"; status=$?; sleep 1.5; exit $status', "container"]
    reward, verdict = harbor_reward(exported[2] / task.instance_id, "", tmp_path / "w", wrap=wrap,
                                    env={core.TASK_CONTAINER_ENV: "1"})
    assert reward == 0.0 and not verdict["passed"], verdict["reason"]
    assert verdict["ended_processes"] >= 1


HOLDER = """
import os as _os, subprocess as _sp
if not _os.environ.get("SSRKIT_TEST_HOLDER"):
    _os.environ["SSRKIT_TEST_HOLDER"] = "1"
    # a process outside the tests' process group holding the test script's output open
    with open(f"/proc/{{_os.getppid()}}/fd/1", "wb") as _out:
        _p = _sp.Popen(["setsid", "sleep", "120"], stdout=_out, stderr=_out, stdin=_sp.DEVNULL)
    with open({pidfile!r}, "a") as _f:
        _f.write(f"{{_p.pid}}\\n")
"""


@pytest.mark.parametrize("name", HARBOR)
def test_harbor_verifier_does_not_wait_for_a_process_holding_the_tests_output(exported, name, tmp_path):
    """A fix whose code starts a process that leaves the tests' process group and keeps their output open: the
    verdict comes when the test script ends (the verifier used to wait for the end of the output: a hang past
    Harbor's verifier timeout, and no reward)."""
    task = exported[0][name][2]
    task_dir = exported[2] / task.instance_id
    pidfile = tmp_path / "holders"
    clone_snapshot(task_dir / "environment" / core.BUNDLE, tmp_path / "src")
    target = next(p for p in core.patches.touched_files(task.patch) if p.endswith(".py"))
    with open(tmp_path / "src" / target, "a") as fh:
        fh.write(HOLDER.format(pidfile=str(pidfile)))
    fix = git(tmp_path / "src", "diff")
    try:
        started = time.monotonic()
        reward, verdict = harbor_reward(task_dir, fix, tmp_path / "w", timeout=100)
        assert reward == 0.0 and not verdict["passed"]
        assert time.monotonic() - started < 100
    finally:
        for pid in (pidfile.read_text().split() if pidfile.exists() else []):
            try:
                os.kill(int(pid), 9)
            except OSError:
                pass


def test_an_export_never_replaces_a_linked_task_directory(exported, tmp_path):
    """`--out DIR` where DIR/<instance_id> is a symlink to a directory of the user's: refused, left alone (an
    export replaces its task directories)."""
    task = exported[0][HARBOR[0]][2]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    for dest, write in ((tmp_path / "harbor", core.write_harbor_task),
                        (tmp_path / "swebench" / "tasks", lambda t, d: core.write_swebench_task(t, d, "x/y", "b"))):
        dest.mkdir(parents=True)
        (dest / task.instance_id).symlink_to(mine)
        with pytest.raises(SsrkitError, match="is a symlink"):
            write(task, dest)
        assert sorted(p.name for p in mine.iterdir()) == ["keep.txt"]


def forging_fix(task_dir: Path, work: Path, ids: list[str]) -> str:
    """A fix whose code, when the tests import it, writes a `--- PASS` line for every required test into the
    grader's own output (/proc/PID/fd/1 of its ancestor grade.py: root in the container may) and ends the run
    before any test is reported."""
    clone_snapshot(task_dir / core.BUNDLE, work)
    target = next(p for p in core.patches.touched_files((task_dir / "gold.patch").read_text()) if p.endswith(".py"))
    code = f"""
import os as _os
_pid = _os.getppid()
while _pid > 1:
    try:
        if b"grade.py" in open(f"/proc/{{_pid}}/cmdline", "rb").read():
            with open(f"/proc/{{_pid}}/fd/1", "w") as _out:
                _out.write("".join(f"--- PASS: {{_i}} (0s)\\n" for _i in {ids!r}))
            _os._exit(0)
        _pid = int(open(f"/proc/{{_pid}}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:
        break
"""
    with open(work / target, "a") as fh:
        fh.write(code)
    return git(work, "diff")


@pytest.mark.parametrize("name", HARBOR)
def test_swebench_eval_trusts_neither_git_configuration_nor_lines_the_fix_wrote(exported, name, tmp_path):
    """eval.sh: git runs none of the configuration in HOME (hooks, fsmonitor); and a fix whose code writes
    `--- PASS` lines for the required tests into the grader's output, then ends the run, is not resolved: every
    required test the run did not report gets a FAIL line after them."""
    task = exported[0][name][2]
    task_dir = exported[1] / "tasks" / task.instance_id
    home, marker = agent_home(tmp_path, tmp_path / "unused")
    report = run_swebench(task_dir, "", tmp_path / "w", env={"HOME": str(home)})
    assert not marker.exists(), f"git ran the configured code: {marker.read_text()}"
    assert not report["resolved"]
    fix = forging_fix(task_dir, tmp_path / "forge", [*task.fail_to_pass, *task.pass_to_pass])
    report = run_swebench(task_dir, fix, tmp_path / "w2")
    assert not report["resolved"], report["log"][-3000:]
    assert "--- PASS" in report["log"]  # the forged lines were there


# -- the command line -----------------------------------------------------------------------------

def ssrkit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ssrkit", *args], capture_output=True, text=True, cwd=cwd,
                          env=ENV, timeout=300)


def test_cli_directory_formats_need_out_and_valid_artifacts(exported, tmp_path):
    art, source, _ = exported[0][NAMES[0]]
    proc = ssrkit("export", str(art.path), "--format", "harbor")
    assert proc.returncode == 2 and "--out DIR" in proc.stderr
    invalid = shutil.copytree(EXAMPLES / "artifacts" / "textkit" / "invalid-bug_scope", tmp_path / "invalid")
    proc = ssrkit("export", str(invalid), "--repo", source.path, "--format", "swebench-task", "--out",
                  str(tmp_path / "out"))
    assert proc.returncode == 2 and "no valid artifact" in proc.stderr
    proc = ssrkit("export", str(art.path), "--repo", source.path, "--format", "swebench-task", "--out",
                  str(tmp_path / "repo"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "repo" / "sweb.yaml").is_file() and len(list((tmp_path / "repo" / "tasks").iterdir())) == 1
    # a second export into the same repository, under another dataset: both datasets stay published
    other, other_source, _ = exported[0][NAMES[-1]]
    proc = ssrkit("export", str(other.path), "--repo", other_source.path, "--format", "swebench-task", "--out",
                  str(tmp_path / "repo"), "--dataset", "ssrkit/other")
    assert proc.returncode == 0, proc.stderr
    checks = pytest.importorskip("swebench.task.checks")
    assert checks.check_task_repo(tmp_path / "repo") == []
    assert "ssrkit/selfplay" in (tmp_path / "repo" / "sweb.yaml").read_text()
    with pytest.raises(SsrkitError, match="needs the local repository"):
        core.make_task(art, RepoSource.from_image("ssrkit/x:1"))


# -- a real task image, SWE-bench's own harness ---------------------------------------------------

@pytest.fixture(scope="module")
def task_image(exported):
    """The textkit task's image, built from its exported Dockerfile and context (no registry, no network)."""
    from ssrkit.sandbox.image import BASE_IMAGE, build_base_image, image_exists
    from ssrkit.sandbox.factory import docker_available

    why = docker_available()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    import docker

    if not image_exists(BASE_IMAGE):
        try:
            build_base_image(BASE_IMAGE)
        except Exception as e:  # noqa: BLE001 - no debootstrap, not root, no mirror: the test cannot run here
            pytest.skip(f"cannot build the base image {BASE_IMAGE}: {e}")
    task = exported[0][SPACED][2]
    client = docker.from_env()
    build_task_image(exported, task)
    yield task
    client.images.remove(task.image, force=True)


def build_task_image(exported, task) -> None:
    """(Re)build the task's image (SWE-bench's run_instance removes the instance image it ran)."""
    import docker

    from ssrkit.sandbox.image import image_exists

    if not image_exists(task.image):
        docker.from_env().images.build(path=str(exported[1] / "tasks" / task.instance_id), tag=task.image,
                                       network_mode="none", rm=True, forcerm=True)


@pytest.mark.docker
@pytest.mark.parametrize("mode", ["oracle", "null"])
def test_swebench_run_instance_in_the_task_image(exported, task_image, mode, tmp_path, monkeypatch):
    """SWE-bench's run_instance: container from the image, gold patch applied (or none), eval.sh, graded."""
    repo_mod = pytest.importorskip("swebench.task.repo")
    utils = pytest.importorskip("swebench.harness.utils")
    run_evaluation = pytest.importorskip("swebench.harness.run_evaluation")
    import docker

    monkeypatch.chdir(tmp_path)  # the harness writes logs/run_evaluation/ under the working directory
    inst = repo_mod.load_task(exported[1] / "tasks" / task_image.instance_id)
    spec = utils.make_test_spec(inst)
    pred = {"instance_id": inst["instance_id"], "model_patch": inst["patch"] if mode == "oracle" else "",
            "model_name_or_path": f"ssrkit-{mode}"}
    out = run_evaluation.run_instance(spec, pred, docker.from_env(), f"ssrkit-{mode}", timeout=600,
                                      skip_patch=mode == "null")
    assert out is not None, "the harness reported an evaluation error; see logs/run_evaluation under tmp_path"
    report = out[1][inst["instance_id"]]
    assert report["resolved"] == (mode == "oracle"), report
    f2p = report["tests_status"]["FAIL_TO_PASS"]
    assert (f2p["success"] if mode == "oracle" else f2p["failure"]) == sorted(task_image.fail_to_pass)


@pytest.mark.docker
def test_swebench_eval_command_on_the_jsonl(exported, task_image, tmp_path):
    """`swebench eval bugs.jsonl --gold`: SWE-bench's command line on the JSONL export, with the task image."""
    pytest.importorskip("swebench.harness.run_evaluation")
    cli = shutil.which("swebench", path=str(Path(sys.executable).parent))
    if cli is None:
        pytest.skip("no swebench command next to this interpreter")
    jsonl = tmp_path / "bugs.jsonl"
    jsonl.write_text(json.dumps(core.swebench_instance(task_image)) + "\n")
    proc = subprocess.run([cli, "eval", str(jsonl), "--gold", "-i", task_image.instance_id, "--run-id", "jsonl"],
                          cwd=tmp_path, capture_output=True, text=True, env=ENV, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((tmp_path / "gold.jsonl.json").read_text())
    assert report["resolved_ids"] == [task_image.instance_id], report


@pytest.mark.docker
def test_harbor_verifier_in_the_task_image_ends_what_the_agent_left(exported, task_image):
    """Harbor's order in the task's own image: the agent (root) configures git to run its code, writes
    reward.json and leaves a process that rewrites any reward to 1; then `tests/test.sh` runs, and the container
    stays up while the reward is read. The reward is 0, git ran none of the agent's code, and the process was
    ended before the reward was written."""
    import io
    import tarfile

    import docker

    client = docker.from_env()
    build_task_image(exported, task_image)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(exported[2] / task_image.instance_id / "tests", arcname="tests")
    cont = client.containers.run(task_image.image, ["sleep", "infinity"], detach=True, network_mode="none")
    try:
        assert cont.put_archive("/", buf.getvalue())
        logs, marker = "/logs/verifier", "/tmp/agent-code-ran"
        hook = AGENT_CODE.format(marker=marker, logs=logs)
        agent = "\n".join([
            f"mkdir -p {logs} /root/hooks && echo '{{\"reward\": 1}}' > {logs}/reward.json",
            *(f"printf %s {shlex.quote(hook)} > /root/hooks/{n} && chmod 755 /root/hooks/{n}"
              for n in ("fsmonitor", "reference-transaction", "post-checkout", "post-index-change")),
            "printf '[core]\\n\\tfsmonitor = /root/hooks/fsmonitor\\n\\thooksPath = /root/hooks\\n' > /root/.gitconfig",
            "git -C /testbed status >/dev/null; test -s " + marker,  # the agent's configuration works
            f"(setsid sh -c {shlex.quote(REWRITER.format(logs=logs))} >/dev/null 2>&1 &)",
        ])
        code, out = cont.exec_run(["sh", "-c", agent], environment={"HOME": "/root"})
        assert code == 0, out.decode()
        assert cont.exec_run(["rm", marker]).exit_code == 0
        code, out = cont.exec_run(["bash", "/tests/test.sh"], environment={"HOME": "/root"})
        assert code == 0, out.decode()[-3000:]
        time.sleep(1.5)  # the agent's code would have rewritten the reward by now

        def read(path: str) -> str:
            return cont.exec_run(["cat", path]).output.decode()

        assert read(f"{logs}/reward.txt") == "0\n" and json.loads(read(f"{logs}/reward.json")) == {"reward": 0}
        verdict = json.loads(read(f"{logs}/ssrkit_eval.json"))
        assert not verdict["passed"] and verdict["ended_processes"] >= 1, verdict
        assert cont.exec_run(["test", "-e", marker]).exit_code == 1, read(marker)
    finally:
        cont.remove(force=True)

