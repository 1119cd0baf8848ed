"""SWE-bench: JSONL instances (`swebench_instance`, whose `eval.sh` runs ssrkit's grader between SWE-bench's
markers) and v5 task repositories (`write_swebench_repo`: sweb.yaml and one tasks/<instance_id>/ a task)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import Any, Iterable

from ...errors import SsrkitError
from ...sandbox.image import BASE_IMAGE
from ...store.artifact import now_iso
from ...store.fsutil import atomic_write_text, own_dir
from ...store.source import DEFAULT_WORKDIR
from .grader import GIT_SAFETY, GRADER_STATE, VERDICT_ZIP, _b64_heredoc, grader_script, verdict_zip
from .snapshot import write_bundle
from .task import BUNDLE, Task, dockerfile

#: how SWE-bench reads the lines `grade.py swebench` prints, and how it grades them
LOG_PARSER = "parse_log_gotest"
EVAL_TYPE = "pass_and_fail"
SPLIT = "test"
DEFAULT_DATASET = "ssrkit/selfplay"
VERSION = "ssrkit"
#: the markers SWE-bench's grading reads the test output between
START_MARKER, END_MARKER = ">>>>> Start Test Output", ">>>>> End Test Output"


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
