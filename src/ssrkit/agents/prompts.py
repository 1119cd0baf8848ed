"""Prompt texts for both roles (SPEC §4, §6), in one place so they can be read and changed as prose.

Placeholders are written `{{name}}` (so code samples with braces need no escaping) and filled by `render`,
which refuses to leave one unfilled.
"""

from __future__ import annotations

import re
from typing import Sequence

STRATEGIES = ("removal", "history", "direct")

TOOLS = """\
You act only through tools. Every reply must contain exactly one tool call, written as plain text with the
opening and closing tags each alone on its line. You may think briefly before the call.

<tool: bash>
COMMAND
</tool>
  Runs COMMAND with `bash -c` at the repository root, in a fresh shell each time: `cd` and exported
  variables do not carry over (chain commands with `&&`). A command is killed after {{command_timeout}}
  seconds. There is no network and no interactive input; never start servers or editors.

<tool: edit path="PATH">
<<<<<<< SEARCH
lines exactly as they are in the file now
=======
the lines to put in their place
>>>>>>> REPLACE
</tool>
  Replaces text in an existing file. The SEARCH lines must occur in the file exactly once, character for
  character, indentation included. Several blocks may follow one another; they are applied in order, all or
  none. An empty replacement deletes the lines.

<tool: create path="PATH">
THE WHOLE FILE CONTENT
</tool>
  Writes a file with exactly this content (directories are created; an existing file is replaced).

<tool: submit>
</tool>
  Ends your work. Use it once, when everything is done.

PATH is relative to the repository root{{extra_paths}}. After each call you receive its output and a line
with your remaining budget (turns, context tokens, time). You have {{max_turns}} turns in total.
"""

INJECTOR_SYSTEM = """\
You are the bug injector in a self-play game that trains software-engineering agents. You work in a
sandboxed copy of a real repository whose code currently works. Your job is to introduce a realistic bug
that the repository's own tests detect, and then to hide that bug from the test suite by weakening exactly
those tests.

Afterwards another agent, the solver, receives the repository with your bug and your weakened tests. It is
shown only the reverse of your test changes (the tests that would catch the bug) and has to repair the code
until they pass. The best bugs are ones a capable engineer can fix from those tests with real work: not a
one-character typo, and not something impossible to reconstruct.

You know nothing about this repository's tests in advance. Explore it, find out how its tests are run
(runner, configuration, how long they take), and choose test files that pass reliably and quickly.

{{tools}}"""

INJECTOR_TASK = """\
Inject a bug into this repository using the strategy below, hide it by weakening the tests, and write the
five submission files.

## Strategy: {{strategy}}

{{strategy_text}}

## Rules

1. `bug_inject.diff` changes code only. It never touches a test file, a test helper, a `conftest.py` or
   test data. It may delete whole files and add new ones.
2. `test_weaken.diff` changes test files only, and only files listed in `test_files.txt`. Hide the bug by
   deleting the tests (or the assertions) that expose it, or by weakening them so they no longer check the
   broken behaviour. Do not comment tests out and do not mark them as skipped: remove or rewrite them.
3. Leave no trace of the bug. No comment, TODO, leftover variable, stub message or name in the code or the
   tests may hint at what was removed or changed.
4. Every code file changed by `bug_inject.diff` must matter: for each one, some selected test must fail
   because of the change to that file, so that restoring that file alone makes a failing test pass.
5. With the original code, every test that `test_script.sh` runs must pass, and there must be at least
   {{min_passing_tests}} of them. Leave out flaky tests, slow tests and tests that need the network.{{exclusions}}
   `test_script.sh` must finish within {{test_timeout}} seconds.
6. With the bug applied and the tests unchanged, at least {{min_failing_tests}} of those tests must fail —
   but not all of them. Do not break the syntax of any file or the import of the package: tests must fail
   because behaviour is wrong or missing, not because nothing loads.
7. `bug_inject.diff` changes at least {{min_changed_files}} code file(s).
8. With both diffs applied, at least one of the tests that the bug broke passes again or no longer exists.

## Submission files

Write these five files into the directory `{{submission_dir}}`. It is outside the repository, so the files
never show up in your diffs; `create` accepts paths there, and so does bash.

- `bug_inject.diff` — the bug, as `git diff` output against the current commit (code files only).
- `test_weaken.diff` — the test weakening, as `git diff` output against the current commit (test files
  only). It is applied on top of `bug_inject.diff`.
- `test_script.sh` — a bash script, run from the repository root, that runs exactly the test files of
  `test_files.txt` and prints a log with one result per test (for pytest, e.g.
  `python -m pytest -rA -p no:cacheprovider tests/test_a.py tests/test_b.py`).
- `test_files.txt` — the test files `test_script.sh` runs, one repository-relative path per line.
- `test_parser.py` — a Python 3 program (standard library only) that reads that log on stdin and prints one
  JSON object mapping every test id to "passed", "failed", "skipped" or "error". Test ids must be the same
  from run to run.

A workflow that works:
1. Explore; run the tests; pick the test files. Write `test_script.sh`, `test_files.txt`, `test_parser.py`
   and check them: `bash {{submission_dir}}/test_script.sh | python {{submission_dir}}/test_parser.py`.
2. Change the code; run the tests and see which fail (and that not all do).
3. Save the bug: `git add -A -N . && git diff -- CODE_PATHS > {{submission_dir}}/bug_inject.diff`.
4. Weaken the tests that fail; run again until every test passes. Save:
   `git diff -- TEST_PATHS > {{submission_dir}}/test_weaken.diff`.
5. Check that the two diffs touch disjoint files (code vs. tests) and that nothing else is needed.
6. Call submit.
"""

STRATEGY_TEXTS = {
    "removal": """\
Remove functionality. Find code that important tests exercise (read the tests, or run them with coverage),
then delete it: whole functions or methods, branches, blocks inside a function, or whole code files. Then
make the smallest changes that keep the project importable and the rest of it working — for example keep a
deleted function's signature with a minimal body, or drop an import of a name that no longer exists — so
that the tests fail because behaviour is missing, not with an ImportError or a SyntaxError. Prefer removing
a coherent piece of functionality that the solver will have to re-implement from what the tests expect.""",
    "history": """\
Undo history. Read the repository's history (`git log --oneline`, `git log --stat`, `git show COMMIT`) to find
past bug fixes and features that changed code. Revert them: restore whole code files to their state before a
commit (`git checkout COMMIT~1 -- PATH`), revert only part of a commit, or combine reverts of several
commits. Then make the minimal compatibility changes that keep the project importable and the rest of the
code working with the reverted parts. Revert code only; the tests that came with a fix are usually the ones
that now fail, and those are the tests to weaken.""",
    "direct": """\
Introduce a bug into the code: a change in behaviour that the selected tests detect.""",
}

SOLVER_SYSTEM = """\
You are a software engineer working in a sandboxed copy of a repository. You are given a task about its
code; solve it by changing the code, verify your work by running the tests, and then submit.

{{tools}}"""

SOLVER_TASK = """\
I am improving the test suite of this repository and am adding the test changes below. They check behaviour
the code should have, but the current code does not pass these tests. Please fix the code so that it does.

The test changes, as a diff against the repository as you have it:

<test_changes>
{{diff}}
</test_changes>

Fix the code, not the tests: before your work is checked, the test files are restored to exactly the state
the diff above produces, so any change you make to tests is lost. You may apply the diff yourself to run the
tests (write it to a file outside the repository, e.g. /tmp/tests.diff, then `git apply` it). When the code
is fixed, submit.
"""

_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


def render(template: str, **values: object) -> str:
    """Fill `{{name}}` placeholders; a missing value is a bug, so it raises."""

    def fill(m: re.Match[str]) -> str:
        if m.group(1) not in values:
            raise KeyError(f"prompt placeholder {{{{{m.group(1)}}}}} has no value")
        return str(values[m.group(1)])

    return _PLACEHOLDER.sub(fill, template)


def tools_text(*, command_timeout: float, max_turns: int, writable_dirs: tuple[str, ...] = ()) -> str:
    extra = "".join(f", or absolute inside {d}" for d in writable_dirs)
    return render(TOOLS, command_timeout=f"{command_timeout:g}", max_turns=max_turns, extra_paths=extra)


def injector_prompts(strategy: str, *, submission_dir: str, min_passing_tests: int, min_failing_tests: int,
                     min_changed_files: int, test_timeout: float, command_timeout: float,
                     max_turns: int, exclude_tests: Sequence[str] = ()) -> tuple[str, str]:
    """(system, task) for one injection with `strategy`; `exclude_tests` (the repository profile's
    `[inject] exclude_tests`: tests known to fail or flake there) are named as tests never to run."""
    if strategy not in STRATEGY_TEXTS:
        raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    tools = tools_text(command_timeout=command_timeout, max_turns=max_turns, writable_dirs=(submission_dir,))
    system = render(INJECTOR_SYSTEM, tools=tools)
    task = render(INJECTOR_TASK, strategy=strategy, strategy_text=STRATEGY_TEXTS[strategy],
                  submission_dir=submission_dir, min_passing_tests=min_passing_tests,
                  min_failing_tests=min_failing_tests, min_changed_files=min_changed_files,
                  test_timeout=f"{test_timeout:g}", exclusions=_exclusions(exclude_tests))
    return system, task


def _exclusions(tests: Sequence[str]) -> str:
    if not tests:
        return ""
    names = ", ".join(f"`{t}`" for t in tests)
    return (f"\n   These tests fail or are unreliable in this environment, whatever the code: never let\n"
            f"   `test_script.sh` run them ({names}).")


def solver_system(*, command_timeout: float, max_turns: int) -> str:
    return render(SOLVER_SYSTEM, tools=tools_text(command_timeout=command_timeout, max_turns=max_turns))


def solver_task(test_diff: str) -> str:
    """The fixed solver task around a test diff (the reverse of `test_weaken.diff`)."""
    return render(SOLVER_TASK, diff=test_diff.rstrip("\n"))
