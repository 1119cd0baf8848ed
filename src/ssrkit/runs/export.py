"""Export artifacts for other tools: SWE-bench instances and v5 task repositories, Harbor task directories, and
SFT chat data.

Every exported task starts from the same *snapshot*: a commit holding the buggy state (the original tree plus
`bug_inject.diff` and `test_weaken.diff`) with no parent, the way `ssrkit solve` shows the repository to a
solver (one fresh commit: neither the history nor the original code is visible). ssrkit makes it without
touching the user's working tree or index — the diffs are applied with `git apply --cached` on a private index,
the tree committed with `git commit-tree` under a fixed identity and date, so the same artifact always gives
the same commit — and keeps it alive by a ref `refs/ssrkit/<id>`. A task carries it as `repo.bundle` (branch
`main`), which its Dockerfile clones: a build needs neither the user's repository nor a registry. `patch` (the
reverse of the bug) and `test_patch` (the reverse of the weakening) apply to the snapshot.

Grading inside a task's container is ssrkit's own: `templates/export_grader.py` (the container's I/O) completed
by `grader_script` with the artifact's grading data, beside `verdict.zip`, ssrkit's `verdict` package whole
(`verdict_zip`: every rule a fix is judged by, standard library only), which it imports. In a SWE-bench task
`eval.sh` writes both and runs the grader after the harness applied the model patch: it restores the listed test files and the protected files as `ssrkit solve` does, runs
the artifact's test script, parses the log with the artifact's own parser, and prints one line per test in the
`--- PASS: <id> (0s)` form that SWE-bench's `parse_log_gotest` reads back exactly (pytest ids with spaces and
` - ` included, which SWE-bench's pytest parsers cut short). In a Harbor task `tests/test.sh` runs it on the
agent's work tree and writes the verdict of `ssrkit solve` (canary included) as the reward.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator

import tomli_w

from .. import patch as patches
from ..verdict.patterns import SHADOW_NAMES
from ..solve.solvers import task_from_weaken_diff
from ..store.artifact import BUG_DIFF, WEAKEN_DIFF, Artifact, now_iso
from ..errors import SsrkitError
from ..store.fsutil import atomic_write_text, own_dir
from ..solve.grade import GradeSettings
from ..image import BASE_IMAGE, INSTALL_STEP
from ..sandbox import Limits
from ..sandbox.git import GIT_EMAIL, GIT_NAME
from ..solve import JUNK
from ..store.source import DEFAULT_WORKDIR, RepoSource

#: an exported task asks its harness for the limits ssrkit's own sandboxes have
_LIMITS = Limits()

#: how SWE-bench reads the lines `grade.py swebench` prints, and how it grades them
LOG_PARSER = "parse_log_gotest"
EVAL_TYPE = "pass_and_fail"
SPLIT = "test"
DEFAULT_DATASET = "ssrkit/selfplay"
VERSION = "ssrkit"
BUNDLE = "repo.bundle"
BRANCH = "main"
#: the markers SWE-bench's grading reads the test output between
START_MARKER, END_MARKER = ">>>>> Start Test Output", ">>>>> End Test Output"
#: where eval.sh's grader keeps its state unless SSRKIT_GRADE_STATE names another place (tests running
#: exported graders side by side on one host give each its own)
GRADER_STATE = "/tmp/ssrkit-grade"
#: set by the task image (`dockerfile`): the grader may kill every process but its own lineage there, which
#: it never does elsewhere (an agent cannot change the environment of the verifier's command)
TASK_CONTAINER_ENV = "SSRKIT_TASK_CONTAINER"
#: what every git command of an exported task's grading runs with: no hook, no fsmonitor — in Harbor the agent
#: was root in the same container and may have configured both (its configuration files are not read either:
#: GIT_CONFIG_GLOBAL=/dev/null, GIT_CONFIG_NOSYSTEM=1)
GIT_SAFETY = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.quotepath=false")
#: the files Harbor reads the reward from, reward.json first (Harbor's names: not the artifact's REWARD)
REWARD_FILES = tuple(f"reward.{ext}" for ext in ("json", "txt"))
#: ssrkit's verdict package, beside an exported task's grade.py, and the name it is imported by there
VERDICT_ZIP = "verdict.zip"
VERDICT_PACKAGE = "ssrkit_verdict"
FORMATS = ("swebench", "swebench-task", "harbor", "sft")

_IDENT = {"GIT_AUTHOR_NAME": GIT_NAME, "GIT_AUTHOR_EMAIL": GIT_EMAIL,
          "GIT_COMMITTER_NAME": GIT_NAME, "GIT_COMMITTER_EMAIL": GIT_EMAIL,
          "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}


def _git(repo: str, *args: str, env: dict[str, str] | None = None, binary: bool = False) -> Any:
    proc = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=not binary,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        err = proc.stderr if not binary else proc.stderr.decode("utf-8", "replace")
        raise SsrkitError(f"git {args[0]} failed in {repo}: {err.strip()[:300]}")
    return proc.stdout


# -- the snapshot ---------------------------------------------------------------------------------

def snapshot_commit(repo: str, base_commit: str, bug_diff: str, weaken_diff: str, artifact_id: str) -> str:
    """Commit original + bug + weakening as a parentless commit (ref `refs/ssrkit/<id>`); the tree is untouched."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-export-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **_IDENT}
        _git(repo, "read-tree", base_commit, env=env)
        for label, diff in ((BUG_DIFF, bug_diff), (WEAKEN_DIFF, weaken_diff)):
            p = Path(tmp) / label
            p.write_text(diff if diff.endswith("\n") else diff + "\n")
            proc = subprocess.run(["git", "-C", repo, "apply", "--cached", str(p)], capture_output=True,
                                  text=True, env={**os.environ, **env})
            if proc.returncode != 0:
                raise SsrkitError(patches.explain_apply_error(proc.stderr, label) + f" (at commit {base_commit[:12]})")
        tree = _git(repo, "write-tree", env=env).strip()
        commit = _git(repo, "commit-tree", tree, "-m", "Initial commit", env=env).strip()
    _git(repo, "update-ref", f"refs/ssrkit/{artifact_id}", commit)
    return commit


def write_bundle(repo: str, artifact_id: str, dest: Path) -> None:
    """`dest`: a git bundle holding only the snapshot, as branch `main` (a clone checks it out)."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-bundle-") as tmp:
        _git(tmp, "init", "-q", "--bare", ".")
        _git(tmp, "fetch", "-q", "--no-tags", repo, f"+refs/ssrkit/{artifact_id}:refs/heads/{BRANCH}")
        _git(tmp, "symbolic-ref", "HEAD", f"refs/heads/{BRANCH}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        _git(tmp, "bundle", "create", "-q", str(dest.resolve()), "HEAD", BRANCH)


def _blob(repo: str, commit: str, path: str) -> bytes | None:
    proc = subprocess.run(["git", "-C", repo, "cat-file", "blob", f"{commit}:{path}"], capture_output=True)
    return proc.stdout if proc.returncode == 0 else None


# -- one exported task ----------------------------------------------------------------------------

@dataclass
class Task:
    """What every export format is made from: one valid artifact, its snapshot and its grading data."""

    artifact: Artifact
    instance_id: str
    repo_name: str
    source: RepoSource
    original_commit: str
    base_commit: str
    patch: str
    test_patch: str
    problem_statement: str
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    grading: dict[str, Any]

    @property
    def image(self) -> str:
        return swebench_image(self.instance_id)

    @property
    def test_files_in_patch(self) -> list[str]:
        return patches.touched_files(self.test_patch, "test.patch")


def swebench_image(instance_id: str, namespace: str = "swebench") -> str:
    """The image name SWE-bench derives for an instance (its check_task_repo insists on it)."""
    return f"{namespace}/sweb.eval.x86_64.{instance_id}:latest".lower().replace("__", "_1776_")


def _safe_id(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "x"


def _repo_name(source: RepoSource) -> str:
    raw = source.path if source.kind == "local" else source.image
    return _safe_id(Path(str(raw).rstrip("/")).name.replace(":", "_")) or "repo"


def make_task(artifact: Artifact, source: RepoSource | None = None,
              settings: GradeSettings | None = None) -> Task:
    """The exported form of a valid artifact (SsrkitError, saying what to do, otherwise)."""
    validation = artifact.current_validation()
    if not validation.get("valid"):
        raise SsrkitError(f"{artifact.path}: only valid artifacts can be exported; run `ssrkit validate` first")
    meta = artifact.metadata
    source = source or meta.repo
    if source is None:
        raise SsrkitError(f"{artifact.path}: no repository recorded; pass --repo PATH")
    if source.kind != "local":
        raise SsrkitError(f"{artifact.path}: its repository is the image {source.image}; export needs the local "
                          f"repository to make the task's snapshot: pass --repo PATH")
    settings = settings or GradeSettings()
    bug, weaken = artifact.bug_diff, artifact.weaken_diff
    original = meta.base_commit or _git(source.path, "rev-parse", "HEAD").strip()
    base = snapshot_commit(source.path, original, bug, weaken, artifact.id)
    patch, test_patch = patches.reverse(bug), patches.reverse(weaken)
    f2p, p2p = list(validation["fail_to_pass"]), list(validation["pass_to_pass"])
    bug_touched = patches.touched_files(bug, BUG_DIFF)
    weaken_touched = patches.touched_files(weaken, WEAKEN_DIFF)
    known = list(dict.fromkeys([*artifact.test_files, *bug_touched, *weaken_touched]))
    originals = {}
    for p in known:
        data = _blob(source.path, original, p)
        originals[p] = None if data is None else base64.b64encode(data).decode("ascii")
    grading_data = {
        "workdir": DEFAULT_WORKDIR,
        "base_commit": base,
        "test_script": artifact.test_script,
        "test_parser": artifact.test_parser,
        "test_files": artifact.test_files,
        "timeout": settings.timeout,
        "fail_to_pass": f2p,
        "pass_to_pass": p2p,
        "patterns": settings.patterns,
        "guard_shadows": settings.guard_shadows,
        "canary": settings.canary,
        "artifact_touched": list(dict.fromkeys([*bug_touched, *weaken_touched])),
        "weaken_touched": weaken_touched,
        "originals": originals,
        "junk": list(JUNK),
        # the modules a new file must not shadow, as this ssrkit judges them (not the task image's python)
        "shadow_names": sorted(SHADOW_NAMES),
        "to_original": _join_diffs(patch, test_patch),
    }
    name = _repo_name(source)
    return Task(artifact=artifact, instance_id=f"{name}__ssr-{_safe_id(artifact.id)}", repo_name=name,
                source=source, original_commit=original, base_commit=base, patch=patch, test_patch=test_patch,
                problem_statement=task_from_weaken_diff(weaken), fail_to_pass=f2p, pass_to_pass=p2p,
                grading=grading_data)


def _join_diffs(*diffs: str) -> str:
    return "".join(d if d.endswith("\n") else d + "\n" for d in diffs if d.strip())


# -- the in-container grader ----------------------------------------------------------------------

@functools.cache
def verdict_zip() -> bytes:
    """`ssrkit.verdict`, whole, as the zip an exported grader imports it from (package `ssrkit_verdict`; its
    imports are relative, so it needs no other name). Deterministic: sorted names, fixed times and modes, so
    the same ssrkit exports the same bytes."""
    package = resources.files("ssrkit.verdict")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(p.name for p in package.iterdir() if p.name.endswith(".py")):
            info = zipfile.ZipInfo(f"{VERDICT_PACKAGE}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, package.joinpath(name).read_bytes())
    return buf.getvalue()


def grader_script(data: dict[str, Any]) -> str:
    """`grade.py`: a standard-library script that grades in the task's container, importing ssrkit's verdict from
    VERDICT_ZIP beside it (see templates/export_grader.py)."""
    template = resources.files("ssrkit.templates").joinpath("export_grader.py").read_text(encoding="utf-8")
    constants = "\n".join([
        f"VERDICT_ZIP = {VERDICT_ZIP!r}",
        f"TASK_CONTAINER_ENV = {TASK_CONTAINER_ENV!r}",
        f"OUTPUT_BYTES = {_LIMITS.output_bytes!r}",
        f"GIT_SAFETY = {GIT_SAFETY!r}",
        f"REWARD_FILES = {REWARD_FILES!r}",
    ])
    payload = base64.b64encode(json.dumps(data, sort_keys=True).encode("utf-8")).decode("ascii")
    return (f"#!/usr/bin/env python3\nfrom __future__ import annotations\n\n"
            f"# -- from ssrkit.runs.export {'-' * 80}\n{constants}\n\n{template}\n\n"
            f"DATA = json.loads(base64.b64decode({payload!r}).decode('utf-8'))\n\n"
            f"if __name__ == '__main__':\n    sys.exit(main(DATA, sys.argv[1:]))\n")


def _b64_heredoc(dest: str, data: bytes, tag: str) -> list[str]:
    text = base64.encodebytes(data).decode("ascii").rstrip("\n")
    return [f"base64 -d > {dest} <<'{tag}'", *text.splitlines(), tag]


def eval_script(task: Task) -> str:
    """SWE-bench's eval.sh: the test changes applied, ssrkit's grading between the markers."""
    q = shlex.quote
    git = "git " + " ".join(GIT_SAFETY)
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        "# git reads no configuration but the repository's, runs no hook and no fsmonitor",
        'unset $(compgen -e | grep "^GIT_") 2>/dev/null || true',
        "export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null",
        f'cd "${{SSRKIT_WORKDIR:-{DEFAULT_WORKDIR}}}"',
        "mkdir -p /tmp/ssrkit-eval",
        "# the tests that grade the task: test.patch on the snapshot's test files",
        *(f"{git} checkout -q {task.base_commit} -- {q(p)} 2>/dev/null || rm -f -- {q(p)}"
          for p in task.test_files_in_patch),
        *_b64_heredoc("/tmp/ssrkit-eval/test.patch", task.test_patch.encode("utf-8"), "EOF_SSRKIT_TEST_PATCH"),
        f"{git} apply --binary /tmp/ssrkit-eval/test.patch",
        "# ssrkit's grading: protected files restored as `ssrkit solve` does, the artifact's test script and parser;",
        "# it prints one `--- PASS|FAIL|SKIP: <test id> (0s)` line per test (log_parser parse_log_gotest)",
        *_b64_heredoc("/tmp/ssrkit-eval/grade.py", grader_script(task.grading).encode("utf-8"),
                      "EOF_SSRKIT_GRADER"),
        *_b64_heredoc(f"/tmp/ssrkit-eval/{VERDICT_ZIP}", verdict_zip(), "EOF_SSRKIT_VERDICT"),
        f'export SSRKIT_GRADE_STATE="${{SSRKIT_GRADE_STATE:-{GRADER_STATE}}}"',
        f": '{START_MARKER}'",
        "python3 -I -S /tmp/ssrkit-eval/grade.py swebench",
        f": '{END_MARKER}'",
        "# the test script's own log, indented so that no line of it is read as a result",
        """sed 's/^/| /' "$SSRKIT_GRADE_STATE/test.log" 2>/dev/null || true""",
    ]
    return "\n".join(lines) + "\n"


def dockerfile(task: Task, base: str = BASE_IMAGE) -> str:
    """The task image: the snapshot (from `repo.bundle` in the build context) at /testbed, installed."""
    return (f"FROM {base}\n"
            f"COPY {BUNDLE} /tmp/ssrkit-{BUNDLE}\n"
            f"RUN git clone -q /tmp/ssrkit-{BUNDLE} {DEFAULT_WORKDIR} "
            f"&& git -C {DEFAULT_WORKDIR} remote remove origin \\\n"
            f"    && rm /tmp/ssrkit-{BUNDLE}\n"
            f"WORKDIR {DEFAULT_WORKDIR}\n"
            f"ENV {TASK_CONTAINER_ENV}=1\n"
            # ssrkit's test scripts call `python`; Debian's python3 comes without that name
            "RUN command -v python >/dev/null 2>&1 || ln -s \"$(command -v python3)\" /usr/local/bin/python\n"
            + INSTALL_STEP.format(workdir=DEFAULT_WORKDIR)
            + f"LABEL ssrkit.instance={task.instance_id} ssrkit.base_commit={task.base_commit}\n")


# -- SWE-bench: JSONL instances and v5 task repositories ------------------------------------------

def swebench_instance(task: Task, dataset: str = DEFAULT_DATASET) -> dict[str, Any]:
    """One SWE-bench instance (FAIL_TO_PASS / PASS_TO_PASS JSON-encoded, as in SWE-bench's published data)."""
    art, meta = task.artifact, task.artifact.metadata
    return {
        "instance_id": task.instance_id,
        "repo": f"ssrkit/{task.repo_name}",
        "base_commit": task.base_commit,
        "patch": task.patch,
        "test_patch": task.test_patch,
        "problem_statement": task.problem_statement,
        "hints_text": "",
        "FAIL_TO_PASS": json.dumps(task.fail_to_pass),
        "PASS_TO_PASS": json.dumps(task.pass_to_pass),
        "created_at": meta.created or now_iso(),
        "version": VERSION,
        "environment_setup_commit": task.base_commit,
        "image": task.image,
        "eval_script": eval_script(task),
        "log_parser": LOG_PARSER,
        "eval_type": EVAL_TYPE,
        "split": SPLIT,
        "datasets": [dataset],
        "original_commit": task.original_commit,
        "repo_path": task.source.path,
        "artifact": art.id,
        "strategy": meta.strategy,
        "order": meta.order,
        "test_files": art.test_files,
    }


def _yaml(mapping: dict[str, Any]) -> str:
    """Block-style YAML whose values are JSON (valid YAML flow nodes): no YAML library needed."""
    return "".join(f"{k}: {json.dumps(v, ensure_ascii=False)}\n" for k, v in sorted(mapping.items()))


_AS_FILE = {"patch": "gold.patch", "test_patch": "test.patch", "eval_script": "eval.sh",
            "problem_statement": "problem_statement.md"}


def write_swebench_task(task: Task, tasks_dir: Path, dataset: str, base: str) -> Path:
    """tasks/<instance_id>/ of a SWE-bench v5 task repository."""
    d = own_dir(tasks_dir / task.instance_id, "the task directory")
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    inst = swebench_instance(task, dataset)
    for key, name in _AS_FILE.items():
        (d / name).write_text(inst.pop(key))
    tests = {"FAIL_TO_PASS": json.loads(inst.pop("FAIL_TO_PASS")), "PASS_TO_PASS": json.loads(inst.pop("PASS_TO_PASS"))}
    (d / "tests.json").write_text(json.dumps(tests, indent=2, ensure_ascii=False) + "\n")
    inst.pop("hints_text")  # hints.md is written only when there are hints
    (d / "task.yaml").write_text(_yaml(inst))
    (d / "Dockerfile").write_text(dockerfile(task, base))
    write_bundle(task.source.path, task.artifact.id, d / BUNDLE)
    return d


def write_swebench_repo(tasks: Iterable[Task], dest: Path, *, dataset: str = DEFAULT_DATASET,
                        base: str = BASE_IMAGE) -> list[Path]:
    """A SWE-bench v5 task repository at `dest`: sweb.yaml and one tasks/<instance_id>/ per task."""
    dest.mkdir(parents=True, exist_ok=True)
    datasets = [*_published_datasets(dest / "sweb.yaml"), dataset]
    out = [write_swebench_task(t, dest / "tasks", dataset, base) for t in tasks]
    atomic_write_text(dest / "sweb.yaml", _yaml({"datasets": list(dict.fromkeys(datasets)), "splits": [SPLIT]}))
    return out


def _published_datasets(config: Path) -> list[str]:
    """The datasets an earlier export into the same directory published (its tasks stay in them)."""
    if not config.exists():
        return []
    for line in config.read_text().splitlines():
        key, _, value = line.partition(": ")
        if key == "datasets":
            try:
                names = json.loads(value)
            except json.JSONDecodeError:
                break
            if isinstance(names, list) and all(isinstance(n, str) for n in names):
                return names
            break
    raise SsrkitError(f"{config} exists but is not a sweb.yaml ssrkit wrote; export into another directory")


# -- Harbor ---------------------------------------------------------------------------------------

TEST_SH = """\
#!/bin/bash
# ssrkit's verifier: the agent's changes graded exactly as `ssrkit solve` grades a fix (listed test files and
# protected files restored, the artifact's test script and parser, FAIL_TO_PASS and PASS_TO_PASS, the canary).
# Writes /logs/verifier/reward.json and reward.txt (1 or 0), ssrkit_eval.json (the verdict) and test_output.log,
# after ending every process the agent left running (grade.py: what it trusts of the agent's container).
mkdir -p "${SSRKIT_VERIFIER_LOGS:-/logs/verifier}"
python3 -I -S "$(dirname "$0")/grade.py" harbor
"""


def harbor_task_toml(task: Task) -> str:
    meta = task.artifact.metadata
    # the graded run, and for a fix that passes the canary run and its reference run on the original code
    verifier = 3 * task.grading["timeout"] + 120
    return tomli_w.dumps({
        "version": "1.0",
        "metadata": {
            "author_name": "ssrkit",
            "category": "debugging",
            "tags": ["ssrkit", "swe", "bug-fixing", meta.strategy],
            "ssrkit_artifact": task.artifact.id,
            "ssrkit_base_commit": task.base_commit,
            "ssrkit_original_commit": task.original_commit,
            "ssrkit_order": meta.order,
            "fail_to_pass": task.fail_to_pass,
            "pass_to_pass": task.pass_to_pass,
        },
        "verifier": {"timeout_sec": float(verifier)},
        "agent": {"timeout_sec": 1800.0},
        "environment": {"build_timeout_sec": 900.0, "cpus": int(_LIMITS.cpus), "memory_mb": _LIMITS.memory_mb,
                        "storage_mb": 10240},
    })


def write_harbor_task(task: Task, dest: Path, *, base: str = BASE_IMAGE) -> Path:
    """dest/<instance_id>/: task.toml, instruction.md, environment/, tests/, solution/."""
    d = own_dir(dest / task.instance_id, "the task directory")
    if d.exists():
        shutil.rmtree(d)
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(harbor_task_toml(task))
    (d / "instruction.md").write_text(task.problem_statement)
    (d / "environment" / "Dockerfile").write_text(dockerfile(task, base))
    write_bundle(task.source.path, task.artifact.id, d / "environment" / BUNDLE)
    shutil.copyfile(d / "environment" / BUNDLE, d / "tests" / BUNDLE)  # the verifier's own copy of the snapshot
    (d / "tests" / "grade.py").write_text(grader_script(task.grading))
    (d / "tests" / VERDICT_ZIP).write_bytes(verdict_zip())
    (d / "tests" / "test.sh").write_text(TEST_SH)
    (d / "tests" / "test.sh").chmod(0o755)
    solve = ["#!/bin/bash", "# the reference fix: the reverse of the injected bug", "set -e",
             f'cd "${{SSRKIT_WORKDIR:-{DEFAULT_WORKDIR}}}"',
             *_b64_heredoc("/tmp/ssrkit-gold.patch", task.patch.encode("utf-8"), "EOF_SSRKIT_GOLD"),
             "git apply --binary /tmp/ssrkit-gold.patch"]
    (d / "solution" / "solve.sh").write_text("\n".join(solve) + "\n")
    (d / "solution" / "solve.sh").chmod(0o755)
    return d


# -- SFT ------------------------------------------------------------------------------------------

def sft_examples(artifact: Artifact) -> Iterator[dict[str, Any]]:
    """Chat transcripts of the artifact's successful solver attempts."""
    from ..store import trajectory as trajectories
    from ..store.attempts import scored_attempts

    for attempt in scored_attempts(artifact):
        if not attempt.passed:
            continue
        traj = trajectories.read_or_none(attempt.trajectory)  # none, or not an ssrkit.trajectory/1 file: skipped
        if not traj or not traj.get("messages"):
            continue
        yield {
            "messages": traj["messages"],
            "artifact": artifact.id,
            "attempt": attempt.name,
            "model": traj.get("model"),
            "exit_status": traj.get("exit_status"),
        }
