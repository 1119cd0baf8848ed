"""History reverts: past commits that changed code and tests, undone in today's code (SPEC §4).

A commit that touched both code and test files is usually a fix or a feature with its regression tests.
Taking its code change back out brings the old behaviour back while today's tests still expect the new one.

Why partial: restoring a whole file to its content before the commit also undoes every later edit to
it, so on a long history the revert mostly breaks imports (pytoolz/toolz, 1,230 commits: 74 of 93
whole-file candidates did not import). So only the commit's own hunks are taken out of today's file, by
the three-way merge `git revert` does (`git merge-file`: today's file, the file at the commit, the file
before it); hunks that collide with later edits keep today's text. The whole-file revert remains a
fallback for a file where no hunk comes back and which changed no more since the commit than the
commit changed it (the revert is then mostly the commit's own change).

Screening before any test runs: commits whose code diff is huge (refactors, reformatting) are skipped,
and so is a revert that does not parse or that changes only docstrings, comments or layout (same AST).
Recent commits come first (their hunks are likelier to apply, and their code is today's), in an order
seeded like the other streams: the same seed gives the same candidates.
"""

from __future__ import annotations

import ast
import difflib
import functools
import math
import random
import shlex
import warnings
from dataclasses import dataclass

from ..sandbox import timeouts
from ..sandbox.base import Sandbox
from ..verdict.patterns import is_test_like
from ..verdict import pyast

MAX_CODE_LINES = 150  # a commit changing more lines of code than this is a refactor, not a fix
HALF_LIFE = 20  # commits: each 20 commits further back halve a commit's weight in the order


@dataclass(frozen=True)
class Commit:
    sha: str
    subject: str
    code_files: tuple[str, ...]  # Python code files the commit modified
    test_files: tuple[str, ...]
    code_lines: int = 0  # lines added + deleted in those code files


@dataclass(frozen=True)
class Revert:
    text: str  # the file's new content
    whole: bool  # True: the file as it was before the commit (fallback); False: only the commit's hunks undone


def list_commits(sandbox: Sandbox, test_patterns: list[str], *, rev: str = "HEAD", limit: int = 500,
                 test_files: frozenset[str] | set[str] = frozenset()) -> list[Commit]:
    """Non-merge commits reachable from `rev` that modified code files and touched test files, newest first.
    Test files: those `test_patterns` name, and `test_files` (today's files that define tests, where no
    pattern names them: a root `test.py`)."""
    cmd = (f"git log --no-merges --no-renames -n {int(limit)} --format='%x00%H%x09%P%x09%s' --raw --numstat "
           f"{shlex.quote(rev)} --")
    res = sandbox.run(cmd, timeout=timeouts.WHOLE_TREE, env={"GIT_OPTIONAL_LOCKS": "0"})
    if not res.ok:
        return []
    out = []
    for block in res.output.split("\0")[1:]:
        lines = block.strip("\n").splitlines()
        if not lines:
            continue
        sha, parents, subject = (lines[0].split("\t", 2) + ["", ""])[:3]
        if not parents.strip():
            continue  # the root commit has nothing to revert to
        status: dict[str, str] = {}
        size: dict[str, int] = {}
        for line in lines[1:]:
            if line.startswith(":"):  # raw: ":100644 100644 abc def M\tpath"
                meta, _, path = line.partition("\t")
                status[path] = meta.split()[-1] if meta.split() else ""
            elif line.count("\t") >= 2:  # numstat: "added\tdeleted\tpath" ("-" for binary files)
                added, deleted, path = line.split("\t", 2)
                size[path] = sum(int(n) for n in (added, deleted) if n.isdigit())
        tests = sorted(p for p in status if p in test_files or is_test_like(p, test_patterns))
        code = sorted(p for p, s in status.items() if s.startswith("M") and p.endswith(".py")
                      and p not in test_files and not is_test_like(p, test_patterns))
        if code and tests:
            out.append(Commit(sha, subject, tuple(code), tuple(tests), sum(size.get(p, 0) for p in code)))
    return out


def recent_first(commits: list[Commit], rng: random.Random, half_life: float = HALF_LIFE) -> list[Commit]:
    """A seeded order of `commits` (newest first) that favours recent ones: the k-th weighs 2^(-k/half_life).

    Weighted sampling without replacement (Efraimidis–Spirakis keys u^(1/w), compared as logarithms).
    """
    keys = [math.log(1.0 - rng.random()) * 2 ** (k / half_life) for k in range(len(commits))]
    return [commits[k] for k in sorted(range(len(commits)), key=lambda k: -keys[k])]


def revert(sandbox: Sandbox, commit: Commit, path: str, today: str) -> Revert | None:
    """`path` (today's content: `today`) with `commit`'s change to it undone; None when nothing of it can be.

    Partial (the commit's hunks taken out of today's file) where any hunk comes back; where none does,
    the whole file before the commit if it changed no more since the commit than the commit changed it.
    The commit's change and the result must both differ in more than docstrings, comments and layout.
    """
    d = sandbox.scratch_path("history")
    before, after, merged, mine = (shlex.quote(f"{d}/{n}") for n in ("before", "after", "merged", "today"))
    sandbox.write_file(f"{d}/today", today)
    res = sandbox.run(f"git show {shlex.quote(commit.sha + ':' + path)} > {after} && "
                      f"git show {shlex.quote(commit.sha + '^:' + path)} > {before} && "
                      f"git merge-file -p -q --ours {mine} {after} {before} > {merged}",
                      timeout=timeouts.FEW_FILES, env={"GIT_OPTIONAL_LOCKS": "0"})
    if not res.ok:
        return None
    try:
        texts = [sandbox.read_file(f"{d}/{n}").decode("utf-8") for n in ("merged", "before", "after")]
    except (FileNotFoundError, UnicodeDecodeError):
        return None
    partial, old, new = texts
    if _same_code(new, old):
        return None  # the commit changed only docstrings, comments or layout here
    if partial != today:
        return Revert(partial, whole=False) if _changes_code(today, partial) else None
    if _lines_changed(new, today) <= _lines_changed(old, new) and _changes_code(today, old):
        return Revert(old, whole=True)  # every hunk collides with later edits, and they are small
    return None


def _lines_changed(a: str, b: str) -> int:
    """How many lines a change from `a` to `b` touches (a replaced block counts its longer side)."""
    sm = difflib.SequenceMatcher(None, a.splitlines(), b.splitlines(), autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal")


def _same_code(a: str, b: str) -> bool:
    """Both parse, and differ at most in docstrings, comments and layout."""
    code = _code(a)
    return code is not None and code == _code(b)


def _changes_code(today: str, new: str) -> bool:
    """`new` parses and differs from `today` in more than docstrings, comments and layout."""
    return _code(new) is not None and not _same_code(today, new)


@functools.lru_cache(maxsize=32)
def _code(text: str) -> str | None:
    """The AST of `text` without docstrings, dumped (None when it does not parse)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # old code: invalid escape sequences and the like
            tree = pyast.parse(text)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            node.body = body[1:]
    return ast.dump(tree)
