# The in-container half of an exported task's grading (`ssrkit export --format swebench-task | harbor`).
#
# Not runnable alone: `ssrkit.export.grader_script` prepends the pieces of ssrkit's own grading that this code
# calls (testrun.TestRun and parse_statuses, pathmatch.matches, grade.judge, shadowed_module and the canary
# helpers, copied from their source so there is one definition of each) and appends DATA, the task's grading
# data (test script, parser, expected tests, protected patterns, original contents). Standard library only:
# it runs under whatever python3 the task image has.
#
#   grade.py swebench   in the SWE-bench harness, after it applied the model patch to the work tree: restore
#                       the protected files, run the tests, print one `--- PASS|FAIL|SKIP: <test id> (0s)` line
#                       per parsed test (SWE-bench's parse_log_gotest reads them back exactly, ids with spaces
#                       included), exit with the test script's exit code
#   grade.py harbor     Harbor's verifier, after the agent worked in the container: take the agent's changes
#                       as a fix, grade it exactly as `ssrkit solve` does (canary included), write
#                       reward.txt (1 or 0) and ssrkit_eval.json to $SSRKIT_VERIFIER_LOGS (/logs/verifier)

import ast
import base64
import fnmatch
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

STATE = os.environ.get("SSRKIT_GRADE_STATE") or os.path.join(tempfile.gettempdir(), "ssrkit-grade")
TEST_LOG = os.path.join(STATE, "test.log")


class GradeFailure(Exception):
    """The attempt fails before any test runs (the fix does not apply, git is unusable)."""


def _git(git_dir, work, *args, check=True, stdin=None, env=None):
    cmd = ["git", "-c", "core.quotepath=false", "--git-dir", git_dir, "--work-tree", work, *args]
    proc = subprocess.run(cmd, cwd=work, input=stdin, capture_output=True,
                          env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", **(env or {})})
    if check and proc.returncode != 0:
        raise GradeFailure(f"git {args[0]} failed: {proc.stderr.decode('utf-8', 'replace').strip()[:300]}")
    return proc.stdout


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
    proc = subprocess.run(["git", "--git-dir", git_dir, "cat-file", "blob", f"{data['base_commit']}:{path}"],
                          cwd=work, capture_output=True)
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
    """grade.prepare's restore step: listed test files and touched protected files back to the original."""
    paths = list(data["test_files"])
    for p in [*data["artifact_touched"], *fix_touched]:
        if p not in paths and matches(p, data["patterns"]):
            paths.append(p)
    shadows = []
    if data["guard_shadows"]:
        shadows = [p for p in fix_added if p not in paths and shadowed_module(p)
                   and original_content(data, git_dir, work, p) is None]
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


def run_tests(data, work):
    """Run test_script.sh at the repository root, parse its log with test_parser.py afterwards (testrun.run_tests)."""
    scratch = tempfile.mkdtemp(prefix="run-", dir=STATE)
    script = os.path.join(scratch, "test_script.sh")
    with open(script, "w") as fh:
        fh.write(data["test_script"])
    proc = subprocess.Popen(["bash", script], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    timed_out = False
    started = time.monotonic()
    try:
        out, _ = proc.communicate(timeout=data["timeout"])
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    seconds = time.monotonic() - started
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # nothing the tests started outlives them
    except OSError:
        pass
    log = out.decode("utf-8", "replace")
    run = TestRun(log=log, exit_code=proc.returncode if not timed_out else 124, seconds=seconds,
                  timed_out=timed_out, truncated=False)
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
    if run.timed_out:
        print(f">>>>> Tests Timed Out after {data['timeout']:g}s")
        return 124
    if run.parse_error and not run.statuses:
        print(f">>>>> Tests Errored: the test log could not be parsed: {run.parse_error}")
        return run.exit_code or 1
    for test_id, status in sorted(run.statuses.items()):
        word = {PASSED: "PASS", SKIPPED: "SKIP"}.get(status, "FAIL")  # any other status fails that test
        print(f"--- {word}: {test_id} (0s)")
    return run.exit_code


# -- Harbor ---------------------------------------------------------------------------------------

class Repo:
    """The work tree, tracked by a private git directory cloned from the task's bundle (what the agent did
    to the repository's own .git neither hides nor adds changes)."""

    def __init__(self, data, work, bundle):
        self.data, self.work, self.base = data, work, data["base_commit"]
        self.git_dir = os.path.join(STATE, "base.git")
        shutil.rmtree(self.git_dir, ignore_errors=True)
        proc = subprocess.run(["git", "clone", "-q", "--bare", bundle, self.git_dir], capture_output=True)
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
        proc = subprocess.run(["git", "--git-dir", self.git_dir, "--work-tree", self.work, "apply", "--binary",
                               path], cwd=self.work, capture_output=True)
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
    target = canary_target(types.SimpleNamespace(test_files=data["test_files"]), expect)
    _restored, _deleted, originals = repo.prepare(fix)
    if target is None or originals.get(target) is None:
        return False, {"status": "not_run", "note": "no listed test module to put a canary into"}
    ids = sorted({*expect.required, *graded.statuses})
    canary = make_canary(_as_bytes(originals[target]), ids, stem=PurePosixPath(target).stem,
                         avoid=data["test_script"])
    with open(os.path.join(repo.work, target), "w", encoding="utf-8") as fh:
        fh.write(canary.text)
    run = run_tests(data, repo.work)
    seen, broken = canary.statuses(run), canary.sabotaged_statuses(run)
    info = {"file": target, "tests": seen, "sabotaged": broken, "exit_code": run.exit_code}
    if any(s == PASSED for s in (*seen.values(), *broken.values())):
        info.update(status="forged", note="a test that always fails was reported as passed")
        return True, info
    was = canary.sabotaged_statuses(graded) if canary.sabotaged else {}
    if was and not broken:
        info.update(status="vanished", note=f"the known test {canary.sabotaged}, made to fail, is missing from "
                                            "the canary run")
        return True, info
    rest = TestRun(log=run.log, exit_code=0, seconds=run.seconds, timed_out=run.timed_out, truncated=run.truncated,
                   statuses={t: s for t, s in run.statuses.items() if t not in seen and t not in broken},
                   parse_error=run.parse_error)
    ok, why, _ = judge(rest, Expectations([t for t in expect.fail_to_pass if t not in was],
                                          [t for t in expect.pass_to_pass if t not in was]))
    if not ok:
        info.update(status="changed", note=f"with the canary present the required tests do not pass as in the "
                                           f"graded run ({why})")
        return True, info
    if seen:
        info["status"] = "caught"
        return False, info
    # the reference run: the same canary file on the original code (the base snapshot with the bug and the
    # weakening reversed)
    repo.reset()
    repo.apply(data["to_original"], "the reversed bug and weakening")
    with open(os.path.join(repo.work, target), "w", encoding="utf-8") as fh:
        fh.write(canary.text)
    expected = bool(canary.statuses(run_tests(data, repo.work)))
    info["expected_on_original"] = expected
    if expected:
        info.update(status="vanished", note="the canary test is reported on the original code but missing with "
                                            "the fix")
        return True, info
    info.update(status="absent", note="the test script does not report a canary test (it selects tests by id); "
                                      "check inconclusive")
    return False, info


def grade_harbor(data, work, bundle):
    """grade.grade on the agent's work tree: the verdict record (eval.json's fields)."""
    repo = Repo(data, work, bundle)
    fix = fix_diff(repo.git_dir, work, repo.base)
    expect = Expectations(list(data["fail_to_pass"]), list(data["pass_to_pass"]))
    record = {"fix_diff_bytes": len(fix.encode("utf-8", "surrogateescape"))}
    try:
        restored, deleted, _ = repo.prepare(fix)
    except GradeFailure as e:
        return {**record, "passed": False, "reason": f"the fix does not apply: {e}"}
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
            record["reason"] = f"tampering: {info['note']} (canary in {info['file']})"
    # leave the work tree as it is graded: base snapshot + the agent's fix
    repo.reset()
    repo.apply(fix, "the fix")
    return record


def main(data, argv):
    if not argv or argv[0] not in ("swebench", "harbor"):
        print("usage: grade.py swebench|harbor", file=sys.stderr)
        return 2
    work = os.environ.get("SSRKIT_WORKDIR") or data["workdir"]
    shutil.rmtree(STATE, ignore_errors=True)
    os.makedirs(STATE)
    if argv[0] == "swebench":
        try:
            return grade_swebench(data, work)
        except GradeFailure as e:
            print(f">>>>> Tests Errored: {e}")
            return 1
    logs = os.environ.get("SSRKIT_VERIFIER_LOGS") or "/logs/verifier"
    bundle = os.path.join(os.path.dirname(os.path.abspath(__file__)), "repo.bundle")
    try:
        record = grade_harbor(data, work, bundle)
    except GradeFailure as e:
        record = {"passed": False, "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - whatever broke, Harbor gets a reward (0) and the reason
        import traceback

        traceback.print_exc()
        record = {"passed": False, "reason": f"the grader failed: {type(e).__name__}: {e}"}
    os.makedirs(logs, exist_ok=True)
    with open(os.path.join(logs, "ssrkit_eval.json"), "w") as fh:
        json.dump(record, fh, indent=2, sort_keys=True)
    if os.path.exists(TEST_LOG):
        shutil.copy(TEST_LOG, os.path.join(logs, "test_output.log"))
    with open(os.path.join(logs, "reward.txt"), "w") as fh:
        fh.write("1\n" if record["passed"] else "0\n")
    print(("PASSED: " if record["passed"] else "FAILED: ") + record["reason"])
    return 0
