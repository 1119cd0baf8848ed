"""How long ssrkit's own housekeeping commands in a sandbox may take, in seconds: one name per kind of
command, so a site says what it runs and a slow filesystem is fixed in one place.

These bound ssrkit's commands, never the repository's code: a test run's budget is `[validate] timeout`
(`testrun.TEST_TIMEOUT`), a parse's `PARSER_TIMEOUT`, a model's command `[agent] command_timeout`, the
setup script's `SandboxOptions.setup_timeout`. Waits on a client or a process (the Docker client, a
server's health check, `proc.wait`) are not sandbox commands and keep their own numbers.
"""

#: one command on one path, or one question to the shell: mkdir, rm, test -e, stat, tail; `command -v`
ONE_PATH = 30
#: a command on a few files or git objects, or a probe of the environment: git rev-parse, status, show and
#: apply (a patch), the submission directory made afresh, the interpreter, the import roots, a container's
#: start check
FEW_FILES = 60
#: a command over the whole repository: git add -A and commit, diff, log, ls-files; find; the tree's
#: fingerprint; a solver sandbox's preparation; a container's HOME and /tmp emptied
WHOLE_TREE = 120
#: grading's preparation, one script: a fresh history, the protected files put back, the artifact's diffs
GRADE_PREPARE = 240
#: a whole repository copied to or from a snapshot (the docker backend)
TREE_COPY = 900
