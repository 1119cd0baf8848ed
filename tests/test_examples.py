"""The example repositories materialize deterministically and their suites pass."""

import re
import subprocess
import sys

import pytest

from fixtures.git import git
from fixtures.paths import EXAMPLES
from ssrkit.examples import ExampleError, available, materialize, patches

SRC = EXAMPLES / "repos"

# Pinned so that a change in materialize() or in the patches is noticed.
# After editing a patch series on purpose, update these hashes.
EXPECTED_HEADS = {
    "ledger": "75e8b661e6fcf95690c83e883e712d09fb420279",
    "textkit": "f39b46b60a7f89930368ec3687ed80cc8c907aec",
}


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    dest = tmp_path_factory.mktemp("examples")
    return {path.name: path for path in materialize(SRC, dest)}


def test_available():
    assert available(SRC) == ["ledger", "textkit"]
    assert available(SRC / "does-not-exist") == []


def test_heads_are_deterministic(repos, tmp_path):
    again = materialize(SRC, tmp_path, ["textkit", "ledger"])
    assert [p.name for p in again] == ["textkit", "ledger"]
    for path in again:
        assert git(path, "rev-parse", "HEAD").strip() == git(repos[path.name], "rev-parse", "HEAD").strip()
        assert git(path, "rev-parse", "HEAD").strip() == EXPECTED_HEADS[path.name]


def test_materialize_is_idempotent(repos):
    dest = repos["textkit"].parent
    before = {name: git(path, "rev-parse", "HEAD").strip() for name, path in repos.items()}
    assert materialize(SRC, dest) == [dest / "ledger", dest / "textkit"]
    assert {name: git(path, "rev-parse", "HEAD").strip() for name, path in repos.items()} == before


@pytest.mark.parametrize("name", ["textkit", "ledger"])
def test_history(repos, name):
    repo = repos[name]
    subjects = git(repo, "log", "--format=%s").splitlines()
    assert len(subjects) >= 6
    assert len(subjects) == len(patches(SRC, name))
    fixes = [s for s in subjects if s.startswith("Fix ")]
    assert len(fixes) >= 2
    # every fix commit changes code and tests together
    for sha in git(repo, "log", "--format=%H", "--grep=^Fix ").splitlines():
        changed = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", sha).splitlines()
        assert any(p.startswith("tests/") for p in changed), changed
        assert any(not p.startswith("tests/") for p in changed), changed
    assert git(repo, "log", "--format=%an <%ae>").splitlines() == ["Example Maintainer <maintainer@example.invalid>"] * len(subjects)
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def run(repo, *args):
    return subprocess.run(
        [sys.executable, *args], cwd=repo, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


@pytest.mark.parametrize("name", ["textkit", "ledger"])
def test_suite_passes_with_pytest(repos, name):
    proc = run(repos[name], "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    passed = int(re.search(r"(\d+) passed", proc.stdout).group(1))
    assert passed >= 40
    assert "failed" not in proc.stdout.splitlines()[-1]


def test_ledger_suite_passes_with_unittest(repos):
    proc = run(repos["ledger"], "-m", "unittest", "discover", "-v")
    assert proc.returncode == 0, proc.stderr
    assert int(re.search(r"Ran (\d+) tests", proc.stderr).group(1)) >= 40
    assert proc.stderr.rstrip().endswith("OK")


def test_existing_foreign_directory_is_an_error(tmp_path):
    (tmp_path / "textkit").mkdir()
    (tmp_path / "textkit" / "file.txt").write_text("not a repository")
    with pytest.raises(ExampleError, match="not an example repository"):
        materialize(SRC, tmp_path, ["textkit"])


def test_modified_repository_is_an_error(tmp_path):
    (repo,) = materialize(SRC, tmp_path, ["ledger"])
    (repo / "ledger" / "money.py").write_text("broken = True\n")
    with pytest.raises(ExampleError, match="local changes"):
        materialize(SRC, tmp_path, ["ledger"])


def test_moved_head_is_an_error(tmp_path):
    (repo,) = materialize(SRC, tmp_path, ["ledger"])
    git(repo, "checkout", "-q", "HEAD~1")
    with pytest.raises(ExampleError, match="expected HEAD"):
        materialize(SRC, tmp_path, ["ledger"])


def test_unknown_example(tmp_path):
    with pytest.raises(ExampleError, match="no example repository 'nope'"):
        materialize(SRC, tmp_path, ["nope"])


def test_untracked_build_outputs_are_tolerated(tmp_path):
    (repo,) = materialize(SRC, tmp_path, ["textkit"])
    (repo / "src" / "textkit" / "__pycache__").mkdir()
    (repo / "notes.txt").write_text("scratch")
    assert materialize(SRC, tmp_path, ["textkit"]) == [repo]


@pytest.mark.parametrize("name", ["../textkit", "", "a/b", ".hidden"])
def test_bad_names_are_refused(tmp_path, name):
    with pytest.raises(ExampleError, match="invalid example name"):
        materialize(SRC, tmp_path, [name])
