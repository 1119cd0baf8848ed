"""Hostile fixes, bug artifacts and artifact directories against grading: each gets a clean verdict.

The classes of issue 14: git-quoted path names, a fix that behaves only while the canary is present, the
answer readable while grading, symlinked artifact outputs, oversized diffs.
"""

from __future__ import annotations


import pytest


from . import calc
from .test_grade_calc import FORCE_PASS_HOOK, FORGER


def octal(name: str) -> str:
    """`name` with its first letter written as git's C-style octal escape."""
    return f"\\{ord(name[0]):03o}{name[1:]}"


def quote_paths(diff: str, path: str) -> str:
    """Spell `path` in every header of `diff` the way git quotes unusual names."""
    spelled = path.rsplit("/", 1)
    q = (spelled[0] + "/" + octal(spelled[1])) if len(spelled) == 2 else octal(path)
    for side in ("a", "b"):
        diff = diff.replace(f"{side}/{path}", f'"{side}/{q}"')
    return diff


@pytest.mark.parametrize("path, text", [
    ("conftest.py", FORCE_PASS_HOOK),  # protected file
    ("tests/conftest.py", calc.CONFTEST + FORCE_PASS_HOOK),  # test-like file (the listed tests' dir)
    ("argparse.py", FORGER),  # stdlib shadow at the import root
    ("pytest.py", FORGER),  # the runner's own name
])
def test_quoted_names_do_not_bypass_the_path_rules(engine, calc_artifact, calc_repo, path, text):
    fix = quote_paths(calc.diff_of(calc_repo, {path: text}), path)
    assert "\\" in fix
    g = engine.grade_fix(calc_artifact, calc_artifact.metadata.repo, fix)
    assert not g.passed, g.reason
    assert "FAIL_TO_PASS" in g.reason
    assert path in g.restored + g.deleted


def test_quoted_test_file_in_a_bug_fails_the_scope_check(tmp_path, calc_repo):
    from ssrkit.artifact import create_artifact, Metadata
    from ssrkit.source import RepoSource
    from .conftest import validate

    base = calc.make_artifact(tmp_path / "base", calc_repo)
    bug = calc.diff_of(calc_repo, {"src/calc/ops.py": calc.BUGGY_OPS, "tests/test_ops.py": calc.WEAK_TESTS})
    bug = quote_paths(bug, "tests/test_ops.py")
    art = create_artifact(tmp_path / "art", bug_diff=bug, weaken_diff=base.weaken_diff, test_script=base.test_script,
                          test_files=base.test_files, test_parser=base.test_parser,
                          metadata=Metadata(repo=RepoSource.local(calc_repo)))
    result = validate(art)
    scope = next(c for c in result["checks"] if c["name"] == "bug_scope")
    assert scope["status"] == "failed" and "tests/test_ops.py" in scope["message"], scope


@pytest.mark.parametrize("name", ['"b/\\056\\056/outside.py"', '"b/\\056git/hooks/pre-commit"'])
def test_quoted_escapes_are_refused(engine, calc_artifact, name):
    fix = (f"diff --git {name.replace('b/', 'a/', 1)} {name}\nnew file mode 100755\n--- /dev/null\n+++ {name}\n"
           "@@ -0,0 +1 @@\n+echo pwned\n")
    g = engine.grade_fix(calc_artifact, calc_artifact.metadata.repo, fix)
    assert not g.passed and ("escapes the repository" in g.reason or "inside .git" in g.reason), g.reason
