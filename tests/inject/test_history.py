"""History reverts: a past fix is undone in today's code (later edits to its file survive), a hunk that
later edits collide with falls back to the whole file only when they are small, cosmetic and huge commits
are skipped, and the seeded order favours recent commits."""

from __future__ import annotations

import random

import pytest

from fixtures.git import commit_all, git, write_tree
from fixtures.sandboxes import local_sandbox
from fixtures.toyrepos import CALC_OPS, CALC_OPS_V1, CALC_TEST_OPS, CALC_TEST_OPS_V1
from ssrkit import patch as patches
from ssrkit.store.artifact import Artifact
from ssrkit.inject.history import MAX_CODE_LINES, Commit, list_commits, recent_first, revert
from ssrkit.inject.procedural import Session
from ssrkit.validate import Settings

SCALE = '''

def scale(items, factor):
    return [item * factor for item in items]
'''
TEST_SCALE = '''

def test_scale():
    from calc.ops import scale
    assert scale([1, 2], 3) == [3, 6]
'''
TEXT_V1 = '''def shout(text, mark="!"):
    return text.upper()
'''
TEXT_FIXED = TEXT_V1.replace("text.upper()", "text.upper() + mark")
TEXT_TWEAKED = TEXT_V1.replace("text.upper()", "text.upper() + str(mark)")
TEST_TEXT_V1 = '''from calc.text import shout


def test_shout():
    assert shout("hi", mark="") == "HI"


def test_shout_empty():
    assert shout("", mark="") == ""
'''
TEST_TEXT = TEST_TEXT_V1 + '''

def test_shout_mark():
    assert shout("hi") == "HI!"
'''
UNITS_V1 = "def km(m):\n    return m / 100\n" + "\n\n# filler\n" * 4 + "\ndef cm(m):\n    return m * 10\n"
UNITS_FIXED = UNITS_V1.replace("m / 100", "m / 1000").replace("m * 10", "m * 100")
UNITS_LATER = UNITS_FIXED.replace("m * 100", "100 * m")
TEST_UNITS = "from calc.units import cm, km\n\n\ndef test_km():\n    assert km(2000) == 2\n"
TABLE_V1 = "SQUARES = {\n    0: 0,\n}\n"
TABLE = "SQUARES = {\n" + "".join(f"    {i}: {i * i},\n" for i in range(MAX_CODE_LINES + 10)) + "}\n"
TEST_TABLE = "from calc.table import SQUARES\n\n\ndef test_squares():\n    assert SQUARES[0] == 0\n"

FIX_CLAMP = "Fix clamp returning the lower bound for large values"
FIX_SHOUT = "Fix shout dropping its mark"


@pytest.fixture(scope="module")
def hist_repo(tmp_path_factory):
    """Fixes whose files were edited later: once far from the fix, once on the fix's own line."""
    repo = tmp_path_factory.mktemp("hist")
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, {"calc/__init__.py": "", "calc/ops.py": CALC_OPS_V1, "calc/text.py": TEXT_V1,
                      "calc/table.py": TABLE_V1, "calc/units.py": UNITS_V1, "tests/test_ops.py": CALC_TEST_OPS_V1,
                      "tests/test_text.py": TEST_TEXT_V1, "tests/test_table.py": TEST_TABLE,
                      ".gitignore": "__pycache__/\n",
                      "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"})
    commit_all(repo, "Add calc")
    write_tree(repo, {"calc/ops.py": CALC_OPS, "tests/test_ops.py": CALC_TEST_OPS})
    commit_all(repo, FIX_CLAMP)
    write_tree(repo, {"calc/text.py": TEXT_FIXED, "tests/test_text.py": TEST_TEXT})
    commit_all(repo, FIX_SHOUT)
    write_tree(repo, {"calc/units.py": UNITS_FIXED, "tests/test_units.py": TEST_UNITS})
    commit_all(repo, "Fix both units")  # two hunks, the second edited later
    write_tree(repo, {"calc/units.py": UNITS_LATER})
    commit_all(repo, "Reorder a product")
    write_tree(repo, {"calc/ops.py": CALC_OPS + SCALE, "tests/test_ops.py": CALC_TEST_OPS + TEST_SCALE})
    commit_all(repo, "Add scale")  # a later edit to ops.py, away from the clamp fix
    write_tree(repo, {"calc/text.py": TEXT_TWEAKED})
    commit_all(repo, "Format the mark")  # a later edit on the shout fix's own line
    write_tree(repo, {"calc/ops.py": (CALC_OPS + SCALE).replace('"""Arithmetic helpers."""', '"""Arithmetic."""'),
                      "tests/test_ops.py": "# the ops tests\n" + CALC_TEST_OPS + TEST_SCALE})
    commit_all(repo, "Reword the docstring")  # cosmetic
    write_tree(repo, {"calc/table.py": TABLE, "tests/test_table.py": TEST_TABLE + "# more squares\n"})
    commit_all(repo, "Tabulate more squares")  # huge
    return repo


@pytest.fixture(scope="module")
def hist(hist_repo, tmp_path_factory):
    with Session(hist_repo, tmp_path_factory.mktemp("hist-out"), seed=5, sandbox_factory=local_sandbox) as s:
        s.setup()
        yield s


def _commit(session: Session, subject: str) -> Commit:
    return next(c for c in session.commits if c.subject == subject)


def test_commits_know_their_size(hist):
    sizes = {c.subject: c.code_lines for c in hist.commits}
    assert sizes[FIX_CLAMP] == 2 and sizes["Add scale"] == 4
    assert sizes["Tabulate more squares"] > MAX_CODE_LINES
    assert "Format the mark" not in sizes  # touched no test


def test_partial_revert_keeps_later_edits(hist, hist_repo):
    today = (hist_repo / "calc/ops.py").read_text()
    r = revert(hist.setup_sandbox, _commit(hist, FIX_CLAMP), "calc/ops.py", today)
    assert r is not None and not r.whole
    assert r.text == today.replace("        return high", "        return low")  # the fix undone, nothing else
    assert "def scale" in r.text and '"""Arithmetic."""' in r.text


def test_hunks_that_later_edits_collide_with_keep_todays_text(hist, hist_repo):
    r = revert(hist.setup_sandbox, _commit(hist, "Fix both units"), "calc/units.py", UNITS_LATER)
    assert r is not None and not r.whole and r.text == UNITS_LATER.replace("m / 1000", "m / 100")


def test_whole_file_only_where_no_hunk_applies_and_later_edits_are_small(hist, hist_repo):
    today = (hist_repo / "calc/text.py").read_text()
    r = revert(hist.setup_sandbox, _commit(hist, FIX_SHOUT), "calc/text.py", today)
    assert r is not None and r.whole and r.text == TEXT_V1
    # later edits larger than the fix: no whole-file revert
    bigger = today + "".join(f"\n\ndef f{i}():\n    return {i}\n" for i in range(3))
    assert revert(hist.setup_sandbox, _commit(hist, FIX_SHOUT), "calc/text.py", bigger) is None


def test_cosmetic_and_huge_commits_are_skipped(hist, hist_repo):
    today = (hist_repo / "calc/ops.py").read_text()
    assert revert(hist.setup_sandbox, _commit(hist, "Reword the docstring"), "calc/ops.py", today) is None
    details = [c.detail for c in hist.stream("history")]
    assert not any("Reword" in d or "Tabulate" in d for d in details)
    assert any(FIX_CLAMP in d for d in details) and any(FIX_SHOUT in d and "(whole file)" in d for d in details)


def test_the_partial_revert_is_a_valid_bug(hist):
    cand = next(c for c in hist.stream("history") if FIX_CLAMP in c.detail)
    out = hist.evaluate(cand)
    assert out.status == "valid", out.message
    assert out.fail_to_pass == ["tests/test_ops.py::test_clamp_high"]
    bug = Artifact(out.artifact).bug_diff
    assert patches.touched_files(bug) == ["calc/ops.py"]
    assert "-        return high\n+        return low\n" in bug and "scale" not in bug


def test_same_seed_same_stream(hist, hist_repo, tmp_path):
    first = [(c.target, c.files) for c in hist.stream("history")]
    assert first == [(c.target, c.files) for c in hist.stream("history")]
    with Session(hist_repo, tmp_path, seed=5, sandbox_factory=local_sandbox) as again:
        again.setup()
        assert [(c.target, c.files) for c in again.stream("history")] == first


def test_recent_first_is_seeded_and_favours_recent_commits():
    commits = [Commit(f"{i:040x}", f"c{i}", ("a.py",), ("test_a.py",)) for i in range(60)]
    assert recent_first(commits, random.Random(1)) == recent_first(commits, random.Random(1))
    orders = [recent_first(commits, random.Random(seed)) for seed in range(200)]
    assert len({tuple(c.sha for c in o) for o in orders}) == 200
    rank = {c.sha: i for i, c in enumerate(commits)}
    mean_first_ten = sum(rank[c.sha] for o in orders for c in o[:10]) / (10 * len(orders))
    assert mean_first_ten < 25  # about 21; uniform shuffles would give 29.5
    assert sorted(orders[0], key=lambda c: rank[c.sha]) == commits


def test_list_commits_skips_commits_without_tests(hist):
    commits = list_commits(hist.setup_sandbox, list(Settings().test_patterns))
    assert [c.subject for c in commits] == [c.subject for c in hist.commits]
    assert [c.subject for c in commits][-1] == FIX_CLAMP  # newest first; the root commit is left out


def test_a_root_test_py_that_no_pattern_names_still_makes_history(tmp_path):
    """A repository whose tests live in a root `test.py` (python-slugify): no test pattern names it, but the
    runner runs it, so commits that changed it with the code are fixes to undo like any other."""
    repo = tmp_path / "rootcalc"
    git(repo.parent, "init", "-q", "-b", "main", repo.name)
    tests_v1 = CALC_TEST_OPS_V1.replace("from calc.ops", "from ops")
    write_tree(repo, {"ops.py": CALC_OPS_V1, "test.py": tests_v1, ".gitignore": "__pycache__/\n",
                      "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"test.py\"]\n"})
    commit_all(repo, "Add ops")
    write_tree(repo, {"ops.py": CALC_OPS, "test.py": CALC_TEST_OPS.replace("from calc.ops", "from ops")})
    commit_all(repo, FIX_CLAMP)
    with Session(repo, tmp_path / "out", seed=5, sandbox_factory=local_sandbox) as s:
        s.setup()
        assert [(c.subject, c.code_files, c.test_files) for c in s.commits] == [(FIX_CLAMP, ("ops.py",), ("test.py",))]
        cand = next(s.stream("history"))
        assert cand.target.endswith(":ops.py") and s.evaluate(cand).valid
