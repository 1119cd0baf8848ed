# The in-container half of an exported task's grading (`ssrkit export --format swebench-task | harbor`).
#
# Not runnable alone: `ssrkit.runs.export.grader_script` prepends export's constants (VERDICT_ZIP, GIT_SAFETY, ...)
# and appends DATA, the task's grading data (test script, parser, expected tests, protected patterns, original
# contents). Every rule a fix is judged by comes from ssrkit's own `verdict` package, shipped whole beside this
# script as VERDICT_ZIP and imported from it as `ssrkit_verdict`: this file only does the container's I/O.
# Standard library only: it runs under whatever python3 the task image has.
#
#   grade.py swebench   in the SWE-bench harness, after it applied the model patch to the work tree: restore
#                       the protected files, run the tests, print one `--- PASS|FAIL|SKIP: <test id> (0s)` line
#                       per parsed test (SWE-bench's parse_log_gotest reads them back exactly, ids with spaces
#                       included), exit with the test script's exit code
#   grade.py harbor     Harbor's verifier, after the agent worked in the container: take the agent's changes
#                       as a fix, grade it exactly as `ssrkit solve` does (canary included), write
#                       reward.json and reward.txt (1 or 0) and ssrkit_eval.json to $SSRKIT_VERIFIER_LOGS
#                       (/logs/verifier)
#
# Harbor runs its verifier in the agent's own container, where the agent was root. So the grader trusts
# nothing the agent could have left there: git runs without system or global configuration, hooks or
# fsmonitor (`git_env`, `GIT_SAFETY`); the tests run with a fresh HOME; an old reward file is removed before
# anything else and the reward is written last, by replacing the file; and in the task's image (which sets
# TASK_CONTAINER_ENV) every process but this one, its ancestors and pid 1 is killed before the grading
# starts, after each test run and before the reward is written (`end_leftovers`), so nothing the agent or
# the tests started can rewrite the reward afterwards. An agent that replaced the system's python3, bash or
# git is beyond any verifier running in its container: grade such runs from the diff (`ssrkit solve --patch`,
# or SWE-bench's fresh container).

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import PurePosixPath

# ssrkit's grading, whole (`ssrkit.verdict`): the zip beside this script comes first on the path
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), VERDICT_ZIP))
from ssrkit_verdict.canary import (after_reference, canary_target, decide, make_canary, not_run,  # noqa: E402
                                   tampering_reason)
from ssrkit_verdict.judge import Expectations, judge  # noqa: E402
from ssrkit_verdict.output import OutputCapture  # noqa: E402
from ssrkit_verdict.patterns import paths_to_restore  # noqa: E402
from ssrkit_verdict.statuses import PASSED, SKIPPED, ParseError, TestRun, parse_statuses  # noqa: E402
from ssrkit_verdict.text import clip  # noqa: E402

STATE = os.environ.get("SSRKIT_GRADE_STATE") or os.path.join(tempfile.gettempdir(), "ssrkit-grade")
TEST_LOG = os.path.join(STATE, "test.log")


class GradeFailure(Exception):
    """The attempt fails before any test runs (the fix does not apply, git is unusable)."""


def _private_dir(name):
    """A fresh, empty directory STATE/name."""
    path = os.path.join(STATE, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def git_env(extra=None):
    """The environment of every git command: no GIT_* variable of the caller, no system or global
    configuration (an agent's ~/.gitconfig could name an fsmonitor or hooks that run its code), an empty HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "XDG_"))}
    home = os.path.join(STATE, "git-home")
    os.makedirs(home, exist_ok=True)
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_OPTIONAL_LOCKS="0",
               GIT_TERMINAL_PROMPT="0", HOME=home)
    env.update(extra or {})
    return env


def run_git(args, cwd, *, check=True, stdin=None, env=None):
    """`git GIT_SAFETY args` in `cwd` under `git_env` (GradeFailure when it fails and `check`)."""
    proc = subprocess.run(["git", *GIT_SAFETY, *args], cwd=cwd, input=stdin, capture_output=True,
                          env=git_env(env))
    if check and proc.returncode != 0:
        raise GradeFailure(f"git {args[0]} failed: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return proc


def _git(git_dir, work, *args, check=True, stdin=None, env=None):
    return run_git(["--git-dir", git_dir, "--work-tree", work, *args], work, check=check, stdin=stdin,
                   env=env).stdout


def _index_of_work_tree(git_dir, work, base, name):
    """The environment of a private index holding `base` plus every change of the work tree."""
    env = {"GIT_INDEX_FILE": os.path.join(STATE, name)}
    if os.path.exists(env["GIT_INDEX_FILE"]):
        os.unlink(env["GIT_INDEX_FILE"])
    _git(git_dir, work, "read-tree", base, env=env)
    _git(git_dir, work, "add", "-A", ".", env=env)
    return env


def fix_diff(git_dir, work, base):
    """The work tree's changes against `base` as a binary `git diff` (solve.solver_diff)."""
    env = _index_of_work_tree(git_dir, work, base, "fix.index")
    return _git(git_dir, work, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-renames", "--binary",
                base, env=env).decode("utf-8", "surrogateescape")


def changed_paths(git_dir, work, base):
    """(paths the work tree changes against `base`, paths it adds)."""
    env = _index_of_work_tree(git_dir, work, base, "touched.index")
    out = _git(git_dir, work, "diff", "--cached", "--name-status", "--no-renames", "-z", base, env=env)
    fields = out.decode("utf-8", "surrogateescape").split("\0")
    touched, added = [], []
    for status, path in zip(fields[0::2], fields[1::2]):
        touched.append(path)
        if status.startswith("A"):
            added.append(path)
    return touched, added


def original_content(data, git_dir, work, path):
    """The file's content in the original repository (None: it did not exist)."""
    if path in data["originals"]:
        raw = data["originals"][path]
        return None if raw is None else base64.b64decode(raw)
    # not touched by the bug or the weakening: the original content is the base snapshot's
    proc = run_git(["--git-dir", git_dir, "cat-file", "blob", f"{data['base_commit']}:{path}"], work, check=False)
    return proc.stdout if proc.returncode == 0 else None


def _clear(work, path):
    """Remove `path` and every ancestor that is a symlink or a file, so a restore never writes through a link."""
    parts = PurePosixPath(path).parts
    acc = work
    for part in parts[:-1]:
        acc = os.path.join(acc, part)
        if os.path.islink(acc) or (os.path.lexists(acc) and not os.path.isdir(acc)):
            os.unlink(acc)
    target = os.path.join(work, path)
    if os.path.islink(target) or os.path.isfile(target):
        os.unlink(target)
    elif os.path.isdir(target):
        shutil.rmtree(target)


def restore_protected(data, git_dir, work, fix_touched, fix_added):
    """grade.prepare's restore step: listed test files and touched protected files back to the original, new
    shadowing modules deleted (`verdict.patterns.paths_to_restore`)."""
    paths, shadows = paths_to_restore(data["test_files"], [*data["artifact_touched"], *fix_touched], fix_added,
                                      data["patterns"], data["guard_shadows"],
                                      lambda p: original_content(data, git_dir, work, p) is not None,
                                      shadow_names=frozenset(data["shadow_names"]))
    restored, deleted = [], []
    originals = {}
    for p in paths + shadows:
        original = None if p in shadows else original_content(data, git_dir, work, p)
        originals[p] = original
        _clear(work, p)
        if original is None:
            if p in fix_touched:
                deleted.append(p)
            continue
        full = os.path.join(work, p)
        os.makedirs(os.path.dirname(full) or work, exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(original)
        if p in fix_touched or p in data["weaken_touched"]:
            restored.append(p)
    return restored, deleted, originals


def _pump(stream, cap):
    try:
        while chunk := stream.read1(1 << 16):
            cap.feed(chunk)
    except (OSError, ValueError):
        pass


def run_tests(data, work):
    """Run test_script.sh at the repository root, parse its log with test_parser.py afterwards (testrun.run_tests)."""
    scratch = tempfile.mkdtemp(prefix="run-", dir=STATE)
    script = os.path.join(scratch, "test_script.sh")
    with open(script, "w") as fh:
        fh.write(data["test_script"])
    # a fresh HOME, as in ssrkit's sandboxes: nothing the agent left in its own (a user site-packages, a
    # usercustomize.py, tool configuration) reaches the tests
    env = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    env["HOME"] = _private_dir("home")
    proc = subprocess.Popen(["bash", script], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    timed_out = False
    started = time.monotonic()
    # the log as ssrkit's sandboxes keep it (head and tail within OUTPUT_BYTES), read while the tests run; the
    # verdict waits for the test script, not for the end of its output, which a process that left the group
    # could hold open forever
    cap = OutputCapture(OUTPUT_BYTES)
    reader = threading.Thread(target=_pump, args=(proc.stdout, cap), daemon=True)
    reader.start()
    try:
        proc.wait(timeout=data["timeout"])
    except subprocess.TimeoutExpired:
        timed_out = True
    seconds = time.monotonic() - started
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing the tests started outlives them
    except OSError:
        pass
    end_leftovers()  # nor what left their process group (setsid)
    proc.wait()
    reader.join(5)
    out, truncated = cap.result()
    log = out.decode("utf-8", "replace")
    run = TestRun(log=log, exit_code=proc.returncode if not timed_out else 124, seconds=seconds,
                  timed_out=timed_out, truncated=truncated)
    parser = os.path.join(scratch, "test_parser.py")  # written only now: the tests cannot have replaced it
    with open(parser, "w") as fh:
        fh.write(data["test_parser"])
    parsed = subprocess.run([sys.executable, "-I", parser], input=log.encode("utf-8", "replace"),
                            capture_output=True, timeout=60)
    if parsed.returncode != 0:
        last = (parsed.stderr.decode("utf-8", "replace").strip().splitlines() or ["no error output"])[-1]
        run.parse_error = f"test_parser.py exited with code {parsed.returncode}: {last}"
    else:
        try:
            run.statuses = parse_statuses(parsed.stdout.decode("utf-8", "replace"))
        except ParseError as e:
            run.parse_error = str(e)
    shutil.rmtree(scratch, ignore_errors=True)
    return run


# -- SWE-bench ------------------------------------------------------------------------------------

def grade_swebench(data, work):
    """Graded state from the harness's work tree; one line per test for parse_log_gotest; the run's exit code."""
    git_dir = os.path.join(work, ".git")
    touched, added = changed_paths(git_dir, work, data["base_commit"])
    restore_protected(data, git_dir, work, touched, added)
    run = run_tests(data, work)
    with open(TEST_LOG, "w") as fh:
        fh.write(run.log)
    statuses = {} if run.timed_out else run.statuses
    if run.timed_out:
        print(f">>>>> Tests Timed Out after {data['timeout']:g}s")
    elif run.parse_error and not run.statuses:
        print(f">>>>> Tests Errored: the test log could not be parsed: {run.parse_error}")
    for test_id, status in sorted(statuses.items()):
        word = {PASSED: "PASS", SKIPPED: "SKIP"}.get(status, "FAIL")  # any other status fails that test
        print(f"--- {word}: {test_id} (0s)")
    # a required test the run did not report fails, in a line of its own: the fix's code, root in the
    # container, could have written a `--- PASS` line for it into this script's output while the tests ran
    for test_id in sorted({*data["fail_to_pass"], *data["pass_to_pass"]} - set(statuses)):
        print(f"--- FAIL: {test_id} (0s)")
    sys.stdout.flush()
    if run.timed_out:
        return 124
    return (run.exit_code or 1) if run.parse_error and not run.statuses else run.exit_code


# -- Harbor ---------------------------------------------------------------------------------------

class Repo:
    """The work tree, tracked by a private git directory cloned from the task's bundle (what the agent did
    to the repository's own .git neither hides nor adds changes)."""

    def __init__(self, data, work, bundle):
        self.data, self.work, self.base = data, work, data["base_commit"]
        self.git_dir = os.path.join(STATE, "base.git")
        shutil.rmtree(self.git_dir, ignore_errors=True)
        proc = run_git(["clone", "-q", "--bare", "--template=", bundle, self.git_dir], STATE, check=False)
        if proc.returncode != 0:
            raise GradeFailure(f"cannot read the task's repository bundle {bundle}: "
                               f"{proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
        os.makedirs(os.path.join(self.git_dir, "info"), exist_ok=True)
        with open(os.path.join(self.git_dir, "info", "exclude"), "w") as fh:
            fh.write("\n".join(data["junk"]) + "\n")

    def git(self, *args, **kw):
        return _git(self.git_dir, self.work, *args, **kw)

    def reset(self):
        """Back to the base snapshot: tracked files checked out, untracked ones and stale bytecode removed."""
        self.git("reset", "-q", "--hard", self.base)
        self.git("clean", "-fdq")
        for root, dirs, _files in os.walk(self.work):
            dirs[:] = [d for d in dirs if d != ".git"]
            if "__pycache__" in dirs:
                shutil.rmtree(os.path.join(root, "__pycache__"), ignore_errors=True)
                dirs.remove("__pycache__")

    def apply(self, diff, label):
        if not diff.strip():
            return
        path = os.path.join(STATE, "apply.diff")
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
            fh.write(diff if diff.endswith("\n") else diff + "\n")
        proc = run_git(["--git-dir", self.git_dir, "--work-tree", self.work, "apply", "--binary", path], self.work,
                       check=False)
        if proc.returncode != 0:
            raise GradeFailure(f"{label} does not apply: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}")

    def prepare(self, fix):
        """grade.prepare: base snapshot (original + bug + weakening) + fix, protected files restored."""
        self.reset()
        self.apply(fix, "the fix")
        touched, added = changed_paths(self.git_dir, self.work, self.base)
        return restore_protected(self.data, self.git_dir, self.work, touched, added)


def _as_bytes(text):
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogateescape")


def check_canary(repo, fix, expect, graded):
    """grade.check_canary in the container: (forged?, details)."""
    data = repo.data
    target = canary_target(data["test_files"], expect)
    _restored, _deleted, originals = repo.prepare(fix)
    if target is None or originals.get(target) is None:
        return False, not_run()
    ids = sorted({*expect.required, *graded.statuses})
    canary = make_canary(_as_bytes(originals[target]), ids, stem=PurePosixPath(target).stem,
                         avoid=data["test_script"])
    with open(os.path.join(repo.work, target), "w", encoding="utf-8") as fh:
        fh.write(canary.text)
    run = run_tests(data, repo.work)
    info = {"file": target, "tests": canary.statuses(run), "sabotaged": canary.sabotaged_statuses(run),
            "exit_code": run.exit_code}
    decision = decide(canary, run, graded, expect)
    if decision is None:
        # the reference run: the same canary file on the original code (the base snapshot with the bug and
        # the weakening reversed)
        repo.reset()
        repo.apply(data["to_original"], "the reversed bug and weakening")
        with open(os.path.join(repo.work, target), "w", encoding="utf-8") as fh:
            fh.write(canary.text)
        info["expected_on_original"] = bool(canary.statuses(run_tests(data, repo.work)))
        decision = after_reference(info["expected_on_original"])
    return decision.record(info), info


def grade_harbor(data, work, bundle):
    """grade.grade on the agent's work tree: the verdict record (eval.json's fields)."""
    repo = Repo(data, work, bundle)
    fix = fix_diff(repo.git_dir, work, repo.base)
    expect = Expectations(list(data["fail_to_pass"]), list(data["pass_to_pass"]))
    record = {"fix_diff_bytes": len(fix.encode("utf-8", "surrogateescape"))}
    try:
        restored, deleted, _ = repo.prepare(fix)
    except GradeFailure as e:
        return {**record, "passed": False, "reason": clip(f"the fix does not apply: {e}")}
    run = run_tests(data, work)
    passed, reason, details = judge(run, expect)
    record.update(passed=passed, reason=reason, tests=run.statuses, exit_code=run.exit_code,
                  timed_out=run.timed_out, seconds=round(run.seconds, 3), parse_error=run.parse_error,
                  restored=restored, deleted=deleted, canary=None, **details)
    with open(TEST_LOG, "w") as fh:
        fh.write(run.log)
    if passed and data["canary"]:
        forged, info = check_canary(repo, fix, expect, run)
        record["canary"] = info
        if forged:
            record["passed"] = False
            record["reason"] = tampering_reason(info)
    record["reason"] = clip(record["reason"])  # bounded as ssrkit solve bounds them
    record["parse_error"] = clip(record["parse_error"]) if record["parse_error"] else record["parse_error"]
    # leave the work tree as it is graded: base snapshot + the agent's fix
    repo.reset()
    repo.apply(fix, "the fix")
    return record


# -- what the agent left running -------------------------------------------------------------------

def _stat_fields(pid):
    """(state, parent pid) of a process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2:].split()
    return (fields[0], int(fields[1])) if len(fields) > 1 else None


def _lineage():
    """This process and its ancestors (the harness's command that runs the verifier)."""
    keep, pid = {1}, os.getpid()
    while pid > 1 and pid not in keep:
        keep.add(pid)
        info = _stat_fields(pid)
        pid = info[1] if info else 0
    return keep


def end_leftovers():
    """Kill every process but pid 1, this one and its ancestors, in the task's container only (the image
    sets TASK_CONTAINER_ENV, which an agent cannot change for the verifier's command): whatever the agent or
    the tests left running could change the work tree while it is graded or rewrite the reward afterwards.
    Each round stops them all first, so none can start a replacement; how many were killed."""
    if os.environ.get(TASK_CONTAINER_ENV) != "1":
        return 0
    try:
        with open("/proc/1/comm") as fh:
            if fh.read().strip() in ("systemd", "init"):  # not a container: a machine's own processes
                return 0
    except OSError:
        return 0
    keep, killed = _lineage(), set()
    for _ in range(50):
        found = []
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) not in keep:
                info = _stat_fields(int(name))
                if info and info[0] not in "ZX" and info[1] != 2:  # not a zombie, nor a kernel thread
                    found.append(int(name))
        if not found:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in found:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        killed.update(found)
        time.sleep(0.02)
    return len(killed)


def _replace_file(logs, name, data):
    """Write logs/name by renaming a new file over it: a symlink, FIFO or directory the agent left there is
    replaced, never written through."""
    path = os.path.join(logs, name)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=logs)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _drop_rewards(logs):
    """Remove any reward file (Harbor reads reward.json before reward.txt): a grader that fails before the
    end leaves no reward, never one the agent wrote."""
    for name in REWARD_FILES:
        path = os.path.join(logs, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.lexists(path):
            os.unlink(path)


def write_verdict(logs, record):
    """ssrkit_eval.json, test_output.log, then the reward files, with nothing left running to change them."""
    record["ended_processes"] = record.get("ended_processes", 0) + end_leftovers()
    _replace_file(logs, "ssrkit_eval.json", json.dumps(record, indent=2, sort_keys=True).encode("utf-8"))
    if os.path.exists(TEST_LOG):
        with open(TEST_LOG, "rb") as fh:
            _replace_file(logs, "test_output.log", fh.read())
    reward = 1 if record["passed"] else 0
    _replace_file(logs, "reward.json", json.dumps({"reward": reward}).encode("ascii") + b"\n")
    _replace_file(logs, "reward.txt", f"{reward}\n".encode("ascii"))


def _fresh_state():
    if os.path.islink(STATE) or (os.path.lexists(STATE) and not os.path.isdir(STATE)):
        os.unlink(STATE)
    shutil.rmtree(STATE, ignore_errors=True)
    os.makedirs(STATE, mode=0o700)


def main(data, argv):
    if not argv or argv[0] not in ("swebench", "harbor"):
        print("usage: grade.py swebench|harbor", file=sys.stderr)
        return 2
    work = os.environ.get("SSRKIT_WORKDIR") or data["workdir"]
    if argv[0] == "swebench":
        _fresh_state()
        try:
            return grade_swebench(data, work)
        except GradeFailure as e:
            print(f">>>>> Tests Errored: {e}")
            return 1
    logs = os.environ.get("SSRKIT_VERIFIER_LOGS") or "/logs/verifier"
    os.makedirs(logs, exist_ok=True)
    _drop_rewards(logs)
    ended = end_leftovers()  # before the work tree is read: nothing of the agent's changes it while it is graded
    bundle = os.path.join(os.path.dirname(os.path.abspath(__file__)), "repo.bundle")
    try:
        _fresh_state()
        record = grade_harbor(data, work, bundle)
    except GradeFailure as e:
        record = {"passed": False, "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - whatever broke, Harbor gets a reward (0) and the reason
        import traceback

        traceback.print_exc()
        record = {"passed": False, "reason": f"the grader failed: {type(e).__name__}: {e}"}
    record["ended_processes"] = ended
    write_verdict(logs, record)
    print(("PASSED: " if record["passed"] else "FAILED: ") + record["reason"])
    return 0
