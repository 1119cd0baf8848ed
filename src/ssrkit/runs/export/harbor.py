"""Harbor: one task directory a task (task.toml, instruction.md, environment/, tests/ with ssrkit's grader as
the verifier, solution/ with the reference fix)."""

from __future__ import annotations

import shutil
from pathlib import Path

import tomli_w

from ...sandbox.image import BASE_IMAGE
from ...store.fsutil import own_dir
from ...store.source import DEFAULT_WORKDIR
from .grader import _LIMITS, VERDICT_ZIP, _b64_heredoc, grader_script, verdict_zip
from .snapshot import write_bundle
from .task import BUNDLE, Task, dockerfile

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
