"""The static checks of `ssrkit validate` on a prepared context: files and diffs only, no sandbox is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssrkit.store.artifact import BUG_DIFF, TEST_FILES, TEST_PARSER, TEST_SCRIPT, WEAKEN_DIFF, Artifact
from ssrkit.store.source import RepoSource
from ssrkit.validate.checks import FAIL, PASS, _Context, check_bug_scope, check_diffs_parse, check_files
from ssrkit.validate.settings import Settings
from ssrkit.validate.checks import check_test_files_exist, check_weaken_scope

pytestmark = pytest.mark.fast

CODE_DIFF = """--- a/pkg/ops.py
+++ b/pkg/ops.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a + b
+    return a - b
"""
TEST_DIFF = """--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -1,3 +1,1 @@
 from pkg.ops import add
-def test_add():
-    assert add(1, 2) == 3
"""


class NoSandbox:
    """A validator that must not be asked for a sandbox: these checks are static."""

    def open(self, source):
        raise AssertionError("a static check opened a sandbox")


def context(tmp_path: Path, *, bug: str = CODE_DIFF, weaken: str = TEST_DIFF, listed: str = "tests/test_ops.py\n",
            settings: Settings | None = None) -> _Context:
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True, exist_ok=True)
    (repo / "tests").mkdir(exist_ok=True)
    (repo / "pkg" / "ops.py").write_text("def add(a, b):\n    return a + b\n")
    (repo / "tests" / "test_ops.py").write_text("from pkg.ops import add\ndef test_add():\n    assert add(1, 2) == 3\n")
    art = tmp_path / "art"
    art.mkdir(exist_ok=True)
    files = {BUG_DIFF: bug, WEAKEN_DIFF: weaken, TEST_FILES: listed, TEST_SCRIPT: "pytest -rA\n",
             TEST_PARSER: "print('{}')\n"}
    for name, text in files.items():
        (art / name).write_text(text)
    return _Context(Artifact(art), RepoSource.local(repo), settings or Settings(), NoSandbox())


def test_a_well_formed_artifact_passes_every_static_check(tmp_path):
    ctx = context(tmp_path)
    for check in (check_files, check_diffs_parse, check_test_files_exist, check_weaken_scope, check_bug_scope):
        status, message = check(ctx)
        assert status == PASS, (check.__name__, message)
    assert ctx.bug_files == ["pkg/ops.py"] and ctx.weaken_files == ["tests/test_ops.py"]


@pytest.mark.parametrize("change, check, message", [
    ({"weaken": ""}, check_files, f"{WEAKEN_DIFF} is empty"),
    ({"bug": TEST_DIFF}, check_bug_scope, "changes test file(s) tests/test_ops.py"),
    ({"weaken": CODE_DIFF}, check_weaken_scope, "changes pkg/ops.py, not listed"),
    ({"listed": "tests/missing.py\n"}, check_test_files_exist, "not in the original repository"),
    ({"listed": "tests/test_ops.py\ntests/test_ops.py\n"}, check_test_files_exist, "more than once"),
    ({"listed": "../outside.py\n"}, check_test_files_exist, "lists '../outside.py'"),
    ({"bug": CODE_DIFF.replace("a/pkg/ops.py", "a/../../etc/passwd")}, check_diffs_parse, ""),
])
def test_each_static_check_names_what_to_fix(tmp_path, change, check, message):
    ctx = context(tmp_path, **change)
    check_diffs_parse(ctx)  # the later checks read what this one parsed
    status, why = check(ctx)
    assert status == FAIL and message in why


def test_min_changed_files_is_a_setting(tmp_path):
    ctx = context(tmp_path, settings=Settings(min_changed_files=2))
    check_diffs_parse(ctx)
    status, why = check_bug_scope(ctx)
    assert status == FAIL and "at least 2 required" in why
