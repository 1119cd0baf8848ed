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

The package, split by job: `snapshot` (the parentless commit and its bundle), `task` (`Task`, `make_task`,
`make_tasks`, the task image), `grader` (grade.py and verdict.zip), `swebench`, `harbor` and `sft` (the formats),
`formats` (`FORMATS`, `write`).
"""

from ... import patch as patches  # noqa: F401  (the diffs a task's patches are read with; tests use it from here)
from .formats import FORMATS, write, write_jsonl
from .grader import (GIT_SAFETY, GRADER_STATE, REWARD_FILES, TASK_CONTAINER_ENV, VERDICT_PACKAGE, VERDICT_ZIP,
                     grader_script, verdict_zip)
from .harbor import TEST_SH, harbor_task_toml, write_harbor_task
from .sft import sft_examples
from .snapshot import BRANCH, snapshot_commit, write_bundle
from .swebench import (DEFAULT_DATASET, END_MARKER, EVAL_TYPE, LOG_PARSER, SPLIT, START_MARKER, VERSION,
                       eval_script, swebench_instance, write_swebench_repo, write_swebench_task)
from .task import BUNDLE, Task, dockerfile, make_task, make_tasks, swebench_image

__all__ = ["BRANCH", "BUNDLE", "DEFAULT_DATASET", "END_MARKER", "EVAL_TYPE", "FORMATS", "GIT_SAFETY", "GRADER_STATE",
           "LOG_PARSER", "REWARD_FILES", "SPLIT", "START_MARKER", "TASK_CONTAINER_ENV", "TEST_SH", "Task",
           "VERDICT_PACKAGE", "VERDICT_ZIP", "VERSION", "dockerfile", "eval_script", "grader_script",
           "harbor_task_toml", "make_task", "make_tasks", "patches", "sft_examples", "snapshot_commit",
           "swebench_image", "swebench_instance", "verdict_zip", "write", "write_bundle", "write_harbor_task",
           "write_jsonl", "write_swebench_repo", "write_swebench_task"]
