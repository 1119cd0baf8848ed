"""Unified diffs: parsing, path safety, reversing and applying against real git repositories."""

from pathlib import Path

import pytest

from fixtures.git import git
from ssrkit import patch
from ssrkit.errors import PatchError

pytestmark = pytest.mark.fast


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    r.mkdir()
    git(r, "init", "-q")
    (r / "pkg").mkdir()
    (r / "pkg" / "a.py").write_text("def f(x):\n    return x + 1\n\n\ndef g():\n    return 2\n")
    (r / "old.txt").write_text("bye\n")
    (r / "mv.txt").write_text("moved content\n" * 5)
    git(r, "add", "-A")
    git(r, "commit", "-qm", "init")
    return r


def make_diff(repo: Path) -> str:
    (repo / "pkg" / "a.py").write_text("def f(x):\n    return x - 1\n\n\ndef g():\n    return 2")
    (repo / "old.txt").unlink()
    (repo / "new.txt").write_text("hello\n")
    git(repo, "mv", "mv.txt", "moved.txt")
    git(repo, "add", "-A")
    d = git(repo, "diff", "--cached", "-M")
    git(repo, "reset", "-q", "--hard")
    return d


def test_parse_lists_added_removed_renamed(repo):
    d = make_diff(repo)
    changes = {c.path: c for c in patch.parse(d)}
    assert changes["new.txt"].added and changes["new.txt"].source is None
    assert changes["old.txt"].removed and changes["old.txt"].target is None
    assert changes["moved.txt"].renamed and changes["moved.txt"].source == "mv.txt"
    assert set(patch.touched_files(d)) == {"pkg/a.py", "old.txt", "new.txt", "mv.txt", "moved.txt"}


def test_reverse_undoes_the_diff(repo):
    d = make_diff(repo)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    patch.apply(repo, d)
    assert (repo / "new.txt").exists() and not (repo / "old.txt").exists()
    assert (repo / "pkg" / "a.py").read_text().endswith("return 2")  # no newline at end survived
    patch.apply(repo, patch.reverse(d))
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts}
    assert after == before


def test_reverse_twice_is_identity_modulo_text(repo):
    d = make_diff(repo)
    assert patch.reverse(patch.reverse(d)) == d


def test_apply_failure_names_file_and_line(repo):
    d = make_diff(repo)
    (repo / "pkg" / "a.py").write_text("def f(x):\n    return x * 7\n\n\ndef g():\n    return 2\n")
    with pytest.raises(PatchError) as e:
        patch.apply(repo, d, label="bug_inject.diff")
    assert "bug_inject.diff does not apply" in str(e.value)
    assert "pkg/a.py" in str(e.value)


@pytest.mark.parametrize("bad", ["../escape.py", "/etc/passwd", ".git/config", "a/../../x"])
def test_paths_escaping_the_repository_are_rejected(bad):
    d = f"--- a/{bad}\n+++ b/{bad}\n@@ -1 +1 @@\n-x\n+y\n"
    with pytest.raises(PatchError, match="touches"):
        patch.check_paths(d, "bug_inject.diff")


def test_garbage_is_not_a_diff():
    with pytest.raises(PatchError, match="bug_inject.diff"):
        patch.parse("@@ -1,3 +1,3 @@\n-only\n", "bug_inject.diff")


def test_split_by_file_parts_apply_independently(repo):
    d = make_diff(repo)
    parts = patch.split_by_file(d)
    assert set(parts) == {"pkg/a.py", "old.txt", "new.txt", "moved.txt"}
    patch.apply(repo, parts["pkg/a.py"])
    assert "x - 1" in (repo / "pkg" / "a.py").read_text()
    assert (repo / "old.txt").exists()


# -- git's path quoting: every rule sees the name `git apply` reads ----------------------------------

def _new_file_diff(name_a: str, name_b: str) -> str:
    return (f"diff --git {name_a} {name_b}\nnew file mode 100644\n--- /dev/null\n+++ {name_b}\n"
            "@@ -0,0 +1 @@\n+x = 1\n")


@pytest.mark.parametrize("quoted, plain", [
    ('"c\\157nftest.py"', "conftest.py"),
    ('"t\\303\\251st.py"', "tést.py"),
    ('"a\\tb\\"c\\\\d"', 'a\tb"c\\d'),
    ("plain.py", "plain.py"),
])
def test_unquote_decodes_c_style_escapes(quoted, plain):
    assert patch.unquote(quoted) == plain


def test_unquote_rejects_unknown_escapes():
    with pytest.raises(PatchError, match="malformed quoted path"):
        patch.unquote('"a\\qb"')


def test_octal_spelled_names_are_decoded_for_touched_files():
    d = _new_file_diff('"a/c\\157nftest.py"', '"b/c\\157nftest.py"')
    assert patch.touched_files(d) == ["conftest.py"]
    d = _new_file_diff('"a/\\141rgparse.py"', '"b/\\141rgparse.py"')
    assert [c.target for c in patch.parse(d)] == ["argparse.py"]


@pytest.mark.parametrize("name, reason", [
    ('"b/\\056\\056/evil.py"', "escapes the repository"),
    ('"b/\\056git/hooks/pre-commit"', "inside .git"),
    ('"b/sub/\\056GIT/config"', "inside .git"),
    ('"b//etc/x"', "absolute path"),
    ('"b/a\\nb.py"', "control character"),
    ('"b/\\377.py"', "not valid UTF-8"),
])
def test_quoted_names_meet_every_path_rule(name, reason):
    d = _new_file_diff(name.replace('"b/', '"a/'), name)
    with pytest.raises(PatchError, match=reason):
        patch.check_paths(d, "fix.diff")


def test_rename_headers_are_decoded_and_checked():
    d = 'diff --git a/ok.py b/ok2.py\nsimilarity index 100%\nrename from ok.py\nrename to "\\056git/config"\n'
    with pytest.raises(PatchError, match="inside .git"):
        patch.check_paths(d)


def test_prefix_is_dropped_like_git_apply_p1():
    # git strips the first component whatever it is: "z/tests/conftest.py" means tests/conftest.py
    d = "--- x/tests/conftest.py\n+++ z/tests/conftest.py\n@@ -0,0 +1 @@\n+x = 1\n"
    assert patch.touched_files(d) == ["tests/conftest.py"]


def test_git_disagreeing_with_the_headers_is_rejected():
    # the diff --git line names one file, the ---/+++ lines another
    d = ("diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/harmless.py\n"
         "@@ -0,0 +1 @@\n+x = 1\n")
    with pytest.raises(PatchError):
        patch.touched_files(d, "fix.diff")


def test_oversized_diff_gets_a_clear_verdict():
    big = "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+" + "b" * (patch.MAX_DIFF_BYTES + 10) + "\n"
    with pytest.raises(PatchError, match="over the 2 MiB limit"):
        patch.parse(big, "fix.diff")


MISCOUNTED = """\
diff --git a/src/x.py b/src/x.py
--- a/src/x.py
+++ b/src/x.py
@@ -1,3 +1,3 @@
 a
-b
+c
 d
@@ -10,4 +10,4 @@ def f():
 x
-y
+z
diff --git a/src/y.py b/src/y.py
--- a/src/y.py
+++ b/src/y.py
@@ -1 +1 @@
-1
+2
"""


@pytest.mark.parametrize("split", [False, True])
def test_a_malformed_hunk_is_named(split):
    """unidiff says only "Hunk is shorter than expected"; the verdict names the hunk, its file and its line."""
    with pytest.raises(PatchError) as e:
        (patch.split_by_file if split else patch.parse)(MISCOUNTED, "bug_inject.diff")
    # (unidiff's own words, here "Hunk diff line expected: diff --git a/src/y.py ...", come first)
    assert str(e.value).startswith("bug_inject.diff is not a valid unified diff: Hunk ")
    assert str(e.value).endswith(
        ": hunk 2 of src/x.py (line 9 of the diff, '@@ -10,4 +10,4 @@ def f():') counts 4 old and 4 new line(s), "
        "its body holds 2 and 2; fix the counts in its @@ line, or make the diff again with `git diff`")
    last = MISCOUNTED[:MISCOUNTED.index("diff --git a/src/y.py")]  # the short hunk at the end: "shorter than expected"
    with pytest.raises(PatchError, match=r"Hunk is shorter than expected: hunk 2 of src/x.py \(line 9 "):
        patch.parse(last, "bug_inject.diff")
    fixed = MISCOUNTED.replace("@@ -10,4 +10,4 @@", "@@ -10,2 +10,2 @@")
    assert patch.bad_hunk(fixed) is None and [c.path for c in patch.parse(fixed, "bug_inject.diff")] == ["src/x.py", "src/y.py"]
