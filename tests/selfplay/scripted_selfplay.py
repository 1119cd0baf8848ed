"""A scripted model that plays both self-play roles on the calc repository (tests/selfplay), with real tools.

Serve it with `python tests/scripted_server.py --script tests/selfplay/scripted_selfplay.py`. `SCRIPT` is a
rule: it reads the conversation and answers the next turn.

- Injector conversations (the task names a submission directory): the k-th one (a number handed out on its
  first turn and repeated in it, so later turns find it in the history) breaks `clamp` (k even) or `sub` (k
  odd) with real bash/edit tool calls, runs the tests, saves both diffs with `git diff` and submits.
- Solver conversations (the task starts "I am improving the test suite"): the k-th one runs the tests, then
  for k even restores the code the test changes ask for (the attempt passes), for k odd only rewrites
  `mean` (a plausible but wrong fix: the attempt fails, and a failed fix that changed code is what
  higher-order bugs are made of). With one attempt at a time, every artifact's group is one pass, one fail.
"""

from __future__ import annotations

import itertools
import re
import threading

from scripted_server import bash, create, edit, submit

PARSER = '''\
import json
import re
import sys

STATUS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}
results = {}
for line in sys.stdin:
    m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED) (\\S+)", line)
    if m:
        results[m.group(2)] = STATUS[m.group(1)]
print(json.dumps(results, indent=1))
'''

CLAMP_HI = "    if x > hi:\n        return hi\n"
CLAMP_LO = "    if x < lo:\n        return lo\n"
TEST_CLAMP_HIGH = "def test_clamp_high():\n    assert clamp(50, 0, 10) == 10\n\n\n"
TEST_SUB = "def test_sub():\n    assert sub(2, 3) == -1\n\n\n"

_counters = {"injector": itertools.count(), "solver": itertools.count()}
_lock = threading.Lock()
TAG = re.compile(r"\((injection|attempt) #(\d+)\)")


def _number(role: str, messages: list[dict]) -> tuple[int, bool]:
    """This conversation's number: handed out on its first turn, read back from that turn afterwards."""
    for m in messages:
        if m.get("role") == "assistant":
            found = TAG.search(m.get("content") or "")
            if found:
                return int(found.group(2)), False
    with _lock:
        return next(_counters[role]), True


def injector_steps(sub: str, k: int) -> list[str]:
    check = f"bash {sub}/test_script.sh | python {sub}/test_parser.py"
    if k % 2 == 0:
        bug = edit("calc.py", CLAMP_LO + CLAMP_HI, CLAMP_LO, "Remove the upper bound of clamp.")
        weaken = edit("tests/test_calc.py", TEST_CLAMP_HIGH, "", "Drop the test that sees it.")
    else:
        bug = edit("calc.py", "    return a - b\n", "    return b - a\n", "Swap the operands of sub.")
        weaken = edit("tests/test_calc.py", TEST_SUB, "", "Drop the test that sees it.")
    return [
        bash("git log --oneline && ls && python -m pytest -q 2>&1 | tail -3",
             f"(injection #{k}) First, the lay of the land."),
        create(f"{sub}/test_script.sh", "#!/bin/bash\npython -m pytest -rA -p no:cacheprovider tests/test_calc.py\n"),
        create(f"{sub}/test_files.txt", "tests/test_calc.py\n"),
        create(f"{sub}/test_parser.py", PARSER),
        bash(check, "Check the script and the parser on the original code."),
        bug,
        bash(f"git add -A -N . && git diff -- calc.py > {sub}/bug_inject.diff && {check}"),
        weaken,
        bash(f"git diff -- tests/test_calc.py > {sub}/test_weaken.diff && {check}"),
        submit("All five files are written."),
    ]


def solver_steps(task: str, k: int) -> list[str]:
    first = bash("python -m pytest -q -p no:cacheprovider 2>&1 | tail -3", f"(attempt #{k}) Run the tests first.")
    if k % 2 == 1:
        fix = edit("calc.py", "    if not xs:\n", "    if len(xs) == 0:\n", "Make the emptiness check explicit.")
    elif "test_clamp_high" in task:
        fix = edit("calc.py", CLAMP_LO, CLAMP_LO + CLAMP_HI, "clamp must respect the upper bound.")
    else:
        fix = edit("calc.py", "    return b - a\n", "    return a - b\n", "sub subtracts b from a.")
    return [first, fix, submit("Fixed.")]


def SCRIPT(messages: list[dict], request: dict) -> str | None:  # noqa: N802 - the name scripted_server loads
    task = messages[1]["content"] if len(messages) > 1 else ""
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    where = re.search(r"into the directory `([^`]+)`", task)
    if where:
        k, _ = _number("injector", messages)
        steps = injector_steps(where.group(1), k)
    elif task.startswith("I am improving the test suite"):
        k, _ = _number("solver", messages)
        steps = solver_steps(task, k)
    else:
        return None
    return steps[turn] if turn < len(steps) else None
