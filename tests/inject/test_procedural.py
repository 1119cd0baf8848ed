"""The procedural pipeline on tiny repositories: valid artifacts of every family, pre-screen discards,
exact weakening, same seed ⇒ same artifacts, duplicates skipped."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pytest

from fixtures.toyrepos import CALC_TEXT
from ssrkit import patch as patches
from ssrkit.store.artifact import CORE_FILES, Artifact
from ssrkit.executor import Shard
from ssrkit.inject.procedural import Candidate, Session, inject
from ssrkit.inject.runner import locate_test
from ssrkit.validate import Settings, Validator


@pytest.fixture(scope="module")
def calc_run(calc_history_repo, sandbox_factory, tmp_path_factory):
    out = tmp_path_factory.mktemp("calc-out")
    result = inject(calc_history_repo, out, n=4, seed=1, sandbox_factory=sandbox_factory)
    return result, out


def test_every_family_gives_a_valid_artifact(calc_run, calc_history_repo):
    result, out = calc_run
    assert len(result.artifacts) == 4
    assert sorted(a.strategy for a in result.artifacts) == ["combine", "expression", "history", "removal"]
    assert result.runner == "pytest"
    for a in result.artifacts:
        art = Artifact(a.path)
        assert a.path == out / a.id == Path(art.validation["artifact"])
        assert art.validation["valid"] is True and art.validation["fail_to_pass"]
        assert art.id == art.content_id() == a.id
        meta = tomllib.loads((a.path / "artifact.toml").read_text())
        assert meta["strategy"] == a.strategy
        assert meta["injector"]["agent"] == "procedural" and meta["injector"]["seed"] == 1
        assert meta["injector"]["operator"] == a.operator and meta["injector"]["target"] == a.target
        assert meta["repo"] == {"kind": "local", "path": str(calc_history_repo)}
        # the bug touches code only, the weakening test files only
        assert all(f.startswith("calc/") for f in patches.touched_files(art.bug_diff))
        assert set(patches.touched_files(art.weaken_diff)) <= set(art.test_files)
        assert art.test_script.startswith("#!/usr/bin/env bash\npython -m pytest -rA -p no:cacheprovider ")
        assert "short test summary" in art.test_parser  # the pytest parser template
    history = next(a for a in result.artifacts if a.strategy == "history")
    assert history.operator == "history_revert" and "Fix clamp" in history.detail
    combine = next(a for a in result.artifacts if a.strategy == "combine")
    assert len(patches.touched_files(Artifact(combine.path).bug_diff)) >= 2
    assert not (out / ".staging").exists()


def test_weakening_removes_exactly_the_failing_tests(calc_run):
    result, _ = calc_run
    for a in result.artifacts:
        art = Artifact(a.path)
        f2p = art.validation["fail_to_pass"]
        expected = {(loc.file, loc.name) for loc in (locate_test(t, "pytest") for t in f2p)}
        removed = set()
        for path, diff in patches.split_by_file(art.weaken_diff).items():
            removed |= {(path, m) for m in re.findall(r"^-[ \t]*def (test_\w+)\(", diff, re.M)}
            assert not re.search(r"^\+", diff.split("@@", 1)[1], re.M)  # only deletions, nothing commented out
        assert removed == expected, a


def test_same_seed_same_artifacts_even_in_parallel(calc_run, calc_history_repo, sandbox_factory, tmp_path):
    result, out = calc_run
    again = inject(calc_history_repo, tmp_path, n=4, seed=1, jobs=2, sandbox_factory=sandbox_factory)
    assert [a.id for a in again.artifacts] == [a.id for a in result.artifacts]
    for a, b in zip(result.artifacts, again.artifacts):
        for name in CORE_FILES:
            assert (a.path / name).read_bytes() == (b.path / name).read_bytes()
        meta_a = (a.path / "artifact.toml").read_text().splitlines()
        meta_b = (b.path / "artifact.toml").read_text().splitlines()
        assert [l for l in meta_a if not l.startswith("created")] == [l for l in meta_b if not l.startswith("created")]


def test_artifacts_pass_a_fresh_validation(calc_run, sandbox_factory):
    """What `ssrkit validate` would say, with fresh sandboxes and no cache."""
    result, _ = calc_run

    class FreshValidator(Validator):
        def open(self, source):
            return sandbox_factory(source)

        def fingerprint(self, source):
            return "fresh"

    validator = FreshValidator(Settings(cache=False))
    combine = next(a for a in result.artifacts if a.strategy == "combine")
    art = Artifact(combine.path)
    report = validator.validate(art, art.metadata.repo)
    assert report.valid, report.first_failure
    assert {c.name for c in report.checks if c.status == "passed"} >= {"inverse_mutation", "weaken_hides"}


@pytest.fixture(scope="module")
def session(calc_history_repo, sandbox_factory, calc_run, tmp_path_factory):
    _, out = calc_run
    with Session(calc_history_repo, out, seed=99, sandbox_factory=sandbox_factory) as s:
        s.setup(history=False)
        yield s


def _candidate(session, path: str, new_text: str, tests: list[str] | None = None) -> Candidate:
    tests = tests or sorted(t for t in session.testmap.outcomes if "test_text" in t)
    return Candidate("expression", 0, "manual", path, "hand-made", files={path: new_text}, prescreen_tests=tests)


def test_prescreen_discards_harmless_and_non_importing_mutants(session):
    harmless = CALC_TEXT.replace('return text.upper() + mark', 'return (text.upper() + mark)')
    out = session.evaluate(_candidate(session, "calc/text.py", harmless))
    assert (out.status, out.runs) == ("harmless", 1)  # one fail-fast run, nothing else
    broken = CALC_TEXT.replace('def initials(name, sep=""):', 'import no_such_module_xyz\n\n\ndef initials(name, sep=""):')
    out = session.evaluate(_candidate(session, "calc/text.py", broken))
    assert (out.status, out.runs) == ("import_error", 1)
    unchanged = session.evaluate(_candidate(session, "calc/text.py", CALC_TEXT))
    assert unchanged.status == "unchanged" and unchanged.runs == 0


def test_the_mutation_stream_parses_only_the_mutations_it_draws(session, monkeypatch):
    """Each mutation is checked to keep the syntax (a parse of its whole module) when the stream draws it,
    not all of them before the first candidate: on a 7,000-line module that was minutes of parsing."""
    from ssrkit.verdict import pyast
    from ssrkit.mutation.operators import mutations

    parses = []
    real = pyast._parse
    monkeypatch.setattr(pyast, "_parse", lambda *a, **kw: (parses.append(1), real(*a, **kw))[1])
    first = next(session.stream("expression"))
    pool = sum(len(mutations(m.st, f, "expression", checked=False)) for m in session.repo.modules.values()
               for f in m.funcs)
    assert first.files and pool > 10
    assert len(parses) <= 3, f"{len(parses)} parses for one candidate out of {pool}"


def test_a_hanging_mutant_is_cut_at_the_screening_timeout(session):
    hang = CALC_TEXT.replace('    if not text:\n', '    import time\n    time.sleep(600)\n    if not text:\n')
    old = session.engine.screen_timeout
    session.engine.screen_timeout = 2.0
    try:
        out = session.evaluate(_candidate(session, "calc/text.py", hang))
    finally:
        session.engine.screen_timeout = old
    assert out.status == "timeout" and out.seconds < 30


BROKEN_TEXT = CALC_TEXT.replace('    if not text:\n', '    raise RuntimeError("broken")\n    if not text:\n') \
    .replace('    parts = [', '    raise RuntimeError("broken")\n    parts = [')


def _mutation(session, new_text: str) -> Candidate:
    """A hand-made mutation of calc/text.py's shout (covered by the shout tests of tests/test_text.py)."""
    covering = sorted(t for t in session.testmap.passing() if "test_shout" in t or "test_empty" in t)
    return Candidate("expression", 0, "manual", "calc/text.py::shout", "hand-made", line=2,
                     files={"calc/text.py": new_text}, prescreen_tests=covering)


def test_a_total_break_is_known_after_a_smoke_run_of_a_few_tests(session, monkeypatch):
    """A bug that breaks every test, those that never run the changed lines too: the pre-screen's smoke
    tests all fail, so the candidate is discarded without a run of the selected test files."""
    import ssrkit.inject.evaluate as evaluate

    commands: list[str] = []
    sb = session.engine.sandbox()
    real_run = sb.run
    monkeypatch.setattr(sb, "run", lambda cmd, **kw: (commands.append(cmd), real_run(cmd, **kw))[1])

    def no_bug_run(*a, **kw):
        raise AssertionError("the selected test files ran")

    monkeypatch.setattr(evaluate, "run_tests", no_bug_run)
    out = session.evaluate(_mutation(session, BROKEN_TEXT))
    assert out.status == "total_break", out.message
    assert "test_initials" in out.message  # a test that does not run shout's lines failed too
    screens = [c for c in commands if "--maxfail=2 " in c]
    assert len(screens) == 1 and "TestShout" in screens[0]
    assert screens[0].index("test_initials") < screens[0].index("TestShout")  # the smoke tests come first
    assert out.runs == 2 and out.seconds < 30  # the pre-screen, and the smoke tests once on the original code
    again = session.evaluate(_mutation(session, BROKEN_TEXT.replace("broken", "broken again")))
    assert again.status == "total_break" and again.runs == 1  # that smoke set is known to pass


def test_a_bug_breaking_only_what_runs_it_is_not_taken_for_a_total_break(session):
    bug = CALC_TEXT.replace('return text.upper() + mark', 'return text.lower() + mark')
    try:
        out = session.evaluate(_mutation(session, bug))
    finally:
        shutil.rmtree(session.engine.staging, ignore_errors=True)  # the module's output directory stays as it was
    assert out.status == "valid", out.message


def test_an_unweakenable_candidate_counts_the_runs_it_made(session, monkeypatch):
    import ssrkit.inject.evaluate as evaluate
    from ssrkit.inject.weaken import WeakenError

    def cannot(*a, **kw):
        raise WeakenError("removing the tests from tests/test_text.py would break its syntax")

    monkeypatch.setattr(evaluate, "_weaken", cannot)
    bug = CALC_TEXT.replace('return text.upper() + mark', 'return text.lower() + mark')
    out = session.evaluate(_mutation(session, bug))
    assert (out.status, out.runs) == ("unweakenable", 2)  # the pre-screen and the bug run (0 before)


def test_the_pre_screen_runs_only_covering_tests_of_the_selected_files(session, monkeypatch):
    """A covering test in a file that is not selected (here: not usable) cannot make the artifact: the
    pre-screen leaves it out (it used to fail there and cost a run of the selected files for nothing)."""
    repo = session.repo
    monkeypatch.setattr(repo, "usable_files", [f for f in repo.usable_files if f != "tests/test_ops.py"])
    commands: list[str] = []
    sb = session.engine.sandbox()
    real_run = sb.run
    monkeypatch.setattr(sb, "run", lambda cmd, **kw: (commands.append(cmd), real_run(cmd, **kw))[1])
    harmless = CALC_TEXT.replace('return text.upper() + mark', 'return (text.upper() + mark)')
    cand = _candidate(session, "calc/text.py", harmless, tests=sorted(session.testmap.passing()))
    out = session.evaluate(cand)
    assert out.status == "harmless" and out.runs == 1
    screen = next(c for c in commands if " -q -rfE " in c)
    assert "tests/test_text.py::" in screen and "tests/test_ops.py" not in screen


def test_run_timeouts_come_from_what_the_tests_took_under_coverage(session, monkeypatch):
    ev = session.engine
    tm = session.testmap
    tests = sorted(tm.passing())[:3]
    assert ev.estimate_timeouts  # no [inject] screen_timeout in the repository
    estimate = 3 * (session.repo.overhead + sum(tm.durations[t] for t in tests))
    assert ev.run_timeout(tests) == pytest.approx(min(ev.screen_timeout, max(10.0, estimate)))
    monkeypatch.setattr(ev, "screen_timeout", 600.0)
    monkeypatch.setitem(tm.durations, tests[0], 100.0)
    assert ev.run_timeout(tests) == pytest.approx(3 * (session.repo.overhead + sum(tm.durations[t] for t in tests)))
    monkeypatch.setitem(tm.durations, tests[0], 1000.0)
    assert ev.run_timeout(tests) == 600.0  # never more than screen_timeout
    monkeypatch.setattr(ev, "estimate_timeouts", False)  # [inject] screen_timeout: that, for every run
    assert ev.run_timeout(tests[1:]) == 600.0


def test_a_hanging_mutant_is_cut_at_a_few_times_what_its_tests_took(session, monkeypatch):
    import ssrkit.inject.evaluate as evaluate

    monkeypatch.setattr(session.engine, "screen_timeout", 300.0)
    monkeypatch.setattr(evaluate, "MIN_RUN_TIMEOUT", 3.0)
    hang = CALC_TEXT.replace('    if not text:\n', '    import time\n    time.sleep(600)\n    if not text:\n')
    out = session.evaluate(_candidate(session, "calc/text.py", hang))
    assert out.status == "timeout" and out.seconds < 60


def test_a_bug_already_in_the_output_is_a_duplicate(session, calc_run):
    result, _ = calc_run
    expr = next(a for a in result.artifacts if a.strategy == "expression")
    path = patches.touched_files(Artifact(expr.path).bug_diff)[0]
    sb = session.engine.sandbox()
    sb.reset("pristine")
    sb.apply_patch(Artifact(expr.path).bug_diff)
    buggy = sb.read_file(path).decode()
    out = session.evaluate(_candidate(session, path, buggy))
    assert out.status == "duplicate" and expr.id in out.message


def test_rerun_with_the_same_seed_reuses_the_artifacts(calc_run, calc_history_repo, sandbox_factory):
    result, out = calc_run
    before = {p.name: (p / "validation.json").read_bytes() for p in out.iterdir() if p.is_dir()}
    again = inject(calc_history_repo, out, n=2, seed=1, strategies="expression,removal", sandbox_factory=sandbox_factory)
    assert all(a.reused for a in again.artifacts)
    assert {a.id for a in again.artifacts} <= set(before)
    assert again.stats["expression"].runs == 0 and again.stats["removal"].runs == 0
    after = {p.name: (p / "validation.json").read_bytes() for p in out.iterdir() if p.is_dir()}
    assert after == before


def test_an_interrupted_run_keeps_its_valid_artifacts_for_the_rerun(calc_run, calc_history_repo, sandbox_factory,
                                                                    tmp_path):
    """Ctrl-C (or SIGTERM) after two valid candidates: they stay in staging, and the rerun of the same seed
    reuses them and ends with the artifacts of an uninterrupted run."""
    result, _ = calc_run
    out = tmp_path / "out"
    valid, notes = [], []

    def stop_after_two(e):
        if e.kind == "note":
            notes.append(e.message)
        elif e.kind == "candidate" and e.outcome.valid:
            valid.append(e.outcome.candidate)
            if len(valid) == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        inject(calc_history_repo, out, n=4, seed=1, on_event=stop_after_two, sandbox_factory=sandbox_factory)
    staged = sorted((out / ".staging").iterdir())
    assert [p.name for p in staged] == sorted(f"{c.strategy}-{c.index:05d}" for c in valid)
    assert all(json.loads((p / "validation.json").read_text())["valid"] for p in staged)
    assert any("2 valid artifacts kept" in n and "rerun the same command" in n for n in notes)
    assert not [p for p in out.iterdir() if not p.name.startswith(".")]  # nothing half-made is an artifact

    again = inject(calc_history_repo, out, n=4, seed=1, sandbox_factory=sandbox_factory)
    assert sorted(a.id for a in again.artifacts) == sorted(a.id for a in result.artifacts)
    assert sorted(a.strategy for a in again.artifacts if a.reused) == sorted(c.strategy for c in valid)
    assert not (out / ".staging").exists()
    for a in again.artifacts:
        assert a.path == out / a.id and Artifact(a.path).validation["artifact"] == str(a.path)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(a.id for a in again.artifacts)


def test_staged_artifacts_of_another_seed_are_dropped(calc_run, calc_history_repo, sandbox_factory, tmp_path):
    result, _ = calc_run
    out = tmp_path / "out"
    stale = out / ".staging" / "expression-00000"
    stale.parent.mkdir(parents=True)
    shutil.copytree(next(a.path for a in result.artifacts if a.strategy == "expression"), stale)  # seed 1's
    again = inject(calc_history_repo, out, n=1, seed=2, strategies="removal", sandbox_factory=sandbox_factory)
    assert not again.artifacts[0].reused and not (out / ".staging").exists()


def test_shards_sharing_an_output_directory_keep_their_own_work(calc_history_repo, sandbox_factory, tmp_path):
    """Shards may write into one directory: each stages, keeps and records its own (a shard's start or end
    never removes another's work in progress)."""
    out = tmp_path / "out"

    def stop_at_first_valid(e):
        if e.kind == "candidate" and e.outcome.valid:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        inject(calc_history_repo, out, n=2, seed=1, strategies="expression,removal", shard=Shard(1, 2),
               on_event=stop_at_first_valid, sandbox_factory=sandbox_factory)
    kept = sorted(p.name for p in (out / ".staging-1-of-2").iterdir())
    assert len(kept) == 1
    second = inject(calc_history_repo, out, n=1, seed=1, strategies="expression", shard=Shard(2, 2),
                    sandbox_factory=sandbox_factory)
    assert len(second.artifacts) == 1 and (out / "inject-2-of-2.json").is_file()
    assert sorted(p.name for p in (out / ".staging-1-of-2").iterdir()) == kept
    first = inject(calc_history_repo, out, n=2, seed=1, strategies="expression,removal", shard=Shard(1, 2),
                   sandbox_factory=sandbox_factory)
    assert any(a.reused for a in first.artifacts) and (out / "inject-1-of-2.json").is_file()
    assert not (out / "inject.json").exists() and not list(out.glob(".staging*"))


def test_unittest_repository(units_repo, sandbox_factory, tmp_path):
    result = inject(units_repo, tmp_path, n=2, seed=3, strategies="expression,removal", sandbox_factory=sandbox_factory)
    assert result.runner == "unittest" and len(result.artifacts) == 2
    for a in result.artifacts:
        art = Artifact(a.path)
        assert art.validation["valid"]
        assert art.test_script == "#!/usr/bin/env bash\npython -m unittest -v tests.test_ops 2>&1\n"
        assert all(t.startswith("tests.test_ops.Test") for t in art.validation["fail_to_pass"])
    summary = json.dumps(result.to_dict())
    assert '"yield"' in summary
