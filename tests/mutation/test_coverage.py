"""Runner detection, the [inject] profile, and the per-test coverage map (ids as the parsers write them)."""

from __future__ import annotations

import shutil

import pytest

from fixtures.git import commit_all
from fixtures.sandboxes import local_sandbox
from ssrkit.inject.procedural import Session
from ssrkit.inject.runner import PYTEST, UNITTEST, detect_runner, list_python_files, load_profile
from ssrkit.testrun import run_tests
from ssrkit.validate import cache_dir


def test_detection_and_profile_override(calc_history_repo, units_repo):
    for repo, runner in ((calc_history_repo, PYTEST), (units_repo, UNITTEST)):
        sb = local_sandbox(repo)
        try:
            assert detect_runner(sb, list_python_files(sb)) == runner
            profile = load_profile(sb, {"runner": "pytest", "args": "-p no:randomly", "python": "python3"})
            assert (profile.runner, profile.args, profile.python) == (PYTEST, ["-p", "no:randomly"], "python3")
        finally:
            sb.close()


def test_map_ids_match_the_parser_and_the_map_is_cached(units_repo, tmp_path, sandbox_factory, monkeypatch):
    repo = tmp_path / "units"
    shutil.copytree(units_repo, repo)
    (repo / "ssrkit.toml").write_text('[inject]\nrunner = "pytest"\n')  # the repository's own profile
    commit_all(repo, "Add an ssrkit profile")
    with Session(repo, tmp_path / "out", sandbox_factory=sandbox_factory) as s:
        s.setup(history=False)
        tm = s.testmap
        assert s.profile.runner == PYTEST
        assert "tests/test_ops.py::TestBetween::test_edges" in tm.passing()
        assert tm.file_of("tests/test_ops.py::TestBetween::test_edges") == "tests/test_ops.py"
        lines = tm.covered_lines("units/ops.py")
        assert tm.tests_covering("units/ops.py", lines) == tm.passing()
        # the parser template reads the same ids from the artifact's test script
        sb = s.engine.sandbox()
        run = run_tests(sb, s.profile.script(["tests/test_ops.py"]), s.profile.parser(), timeout=60)
        assert set(run.statuses) == set(tm.outcomes)
    cached = list((cache_dir().parent / "testmaps").glob("*.json"))
    assert cached
    import ssrkit.mutation.coverage as testmap

    def no_run(*a, **k):
        raise AssertionError("the map of an unchanged repository comes from the cache")

    monkeypatch.setattr(testmap, "run_with_coverage", no_run)
    with Session(repo, tmp_path / "out", sandbox_factory=sandbox_factory) as s:
        s.setup(history=False)
        assert s.testmap.outcomes == tm.outcomes and s.testmap.files == tm.files


def test_files_added_to_reach_min_passing_tests_are_the_cheapest():
    """A covering file with too few tests gets company: the test files that cost least to run (each run of
    the artifact runs them), not the first in name order."""
    from ssrkit.inject.candidates import RepoView
    from ssrkit.inject.runner import Profile
    from ssrkit.mutation.coverage import TestMap
    from ssrkit.validate import Settings

    tests = {"tests/test_a.py::test_one": 0.1}
    tests |= {f"tests/test_b.py::test_{i}": 5.0 for i in range(6)}  # first in name order, 30 s
    tests |= {f"tests/test_c.py::test_{i}": 0.01 for i in range(6)}  # cheapest
    tests |= {f"tests/test_d.py::test_{i}": 0.5 for i in range(6)}
    tm = TestMap(contexts=[], files={}, outcomes={t: "passed" for t in tests},
                 test_files={t: t.split("::")[0] for t in tests}, seconds=40.0, durations=tests)
    view = RepoView(None, tm, Profile("pytest"), Settings(min_passing_tests=5), ["tests/"])
    files, _, expected = view.select_tests({"tests/test_a.py::test_one"})
    assert files == ["tests/test_a.py", "tests/test_c.py"] and len(expected) == 7
    assert view.file_seconds["tests/test_b.py"] == 30.0
    assert view.overhead == pytest.approx(40.0 - sum(tests.values()))
    assert view.seconds(["tests/test_b.py::test_0"]) == pytest.approx(view.overhead + 5.0)
