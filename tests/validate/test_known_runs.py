"""What a caller hands to validation and what the report says back: a run already made (`known=`), and
whether the original run came from the cache (`Report.original_cached`, not a sentence in the notes)."""

from __future__ import annotations

import pytest

from fixtures.paths import EXAMPLES
from fixtures.repos import copy_artifact
from ssrkit import testrun
from ssrkit.store.artifact import Artifact
from ssrkit.sandbox import SandboxOptions, environment_key
from ssrkit.store.source import RepoSource
from ssrkit.validate import Settings, Validator

pytestmark = pytest.mark.usefixtures("private_cache")  # what the cache holds is under test
VALID = "textkit/valid-slug-truncate-off-by-one"


@pytest.fixture
def artifact(tmp_path):
    return Artifact(copy_artifact(EXAMPLES / "artifacts" / VALID, tmp_path / "art"))


@pytest.fixture
def source(example_repos):
    return RepoSource.local(example_repos["textkit"])


def test_the_second_validation_of_a_state_takes_the_original_run_from_the_cache(artifact, source):
    validator = Validator(Settings())
    first = validator.validate(artifact, source)
    second = validator.validate(artifact, source)
    assert first.valid and second.valid
    assert (first.original_cached, second.original_cached) == (False, True)
    assert second.to_dict()["original_cached"] is True
    parser = next(c for c in second.checks if c.name == "parser")
    assert parser.message.endswith("(original run cached)")


def test_the_original_run_is_taken_from_the_cache_only_in_the_environment_it_was_made_in(artifact, source,
                                                                                          tmp_path):
    """A run made with a virtualenv active is no answer without it (its tests may not even import there):
    the cache's key holds what the commands run with, and the state of the virtualenvs they name."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    with_venv = SandboxOptions(env={"VIRTUAL_ENV": str(venv)})
    first = Validator(Settings()).validate(artifact, source)
    same = Validator(Settings()).validate(artifact, source)  # another process would read the same disk cache
    other = Validator(Settings(), options=with_venv)
    assert (first.original_cached, same.original_cached, other.validate(artifact, source).original_cached) == \
        (False, True, False)
    key = environment_key(with_venv)
    assert environment_key(SandboxOptions(env={"VIRTUAL_ENV": str(venv)})) == key
    (venv / "lib" / "python3.11" / "site-packages" / "freezegun").mkdir()  # pip install
    assert environment_key(with_venv) != key


def test_a_bug_run_handed_over_is_used_instead_of_running_it(artifact, source):
    validator = Validator(Settings())
    real = validator.validate(artifact, source)
    # a hand-made bug run in which every test passes: validation must judge that run, not make its own
    passing = testrun.TestRun(log="", exit_code=0, seconds=0.0, timed_out=False, truncated=False,
                              statuses={t: "passed" for t in real.runs["original"]["statuses"]})
    report = validator.validate(artifact, source, known={"bug": passing})
    bug_breaks = next(c for c in report.checks if c.name == "bug_breaks")
    assert not report.valid and bug_breaks.status == "failed" and "0 originally passing" in bug_breaks.message


def test_only_known_run_names_are_accepted(artifact, source):
    with pytest.raises(ValueError, match="not among"):
        Validator(Settings()).validate(artifact, source, known={"original": testrun.TestRun("", 0, 0.0, False, False)})


def _count_commands(monkeypatch) -> list[str]:
    from ssrkit.sandbox.local import LocalSandbox

    seen: list[str] = []
    real = LocalSandbox.run

    def run(self, command, **kw):
        seen.append(command)
        return real(self, command, **kw)

    monkeypatch.setattr(LocalSandbox, "run", run)
    return seen


def _needs_bwrap():
    from ssrkit.sandbox.local import isolation_available

    if isolation_available():
        pytest.skip(f"bubblewrap unusable ({isolation_available()}): runs parse in a command of their own, "
                    "and /tmp is the machine's")


def test_a_valid_artifact_costs_its_three_runs_and_no_separate_applies_command(artifact, source, monkeypatch):
    _needs_bwrap()  # the one-command run (the parser in the test command) needs a pid namespace of its own
    validator = Validator(Settings(cache=False))
    validator.validate(artifact, source)  # the interpreter is resolved (once per process) here
    seen = _count_commands(monkeypatch)
    report = validator.validate(artifact, source)
    assert report.valid
    assert len(seen) == 3  # bug (its applies checked first), original, bug+weaken
    assert "--check" in seen[0] and "test_script.sh" in seen[0]  # the weakening checked on top of the bug
    assert set(report.runs) == {"bug", "original", "bug+weaken"}


def test_a_weakening_that_does_not_apply_on_top_of_the_bug_fails_applies_before_any_test_runs(artifact, source):
    diff = artifact.path / "test_weaken.diff"
    diff.write_text(diff.read_text().replace("def test_truncate_keeps_word_ending", "def test_no_such_test"))
    report = Validator(Settings(cache=False)).validate(artifact, source)
    applies = next(c for c in report.checks if c.name == "applies")
    assert applies.status == "failed" and "applied on top of bug_inject.diff" in applies.message
    assert report.runs == {}


def test_an_artifact_failing_a_static_check_gets_the_applies_check_without_a_test_run(artifact, source, monkeypatch):
    (artifact.path / "test_files.txt").write_text("tests/test_slug.py\nsrc/textkit/slug.py\n")  # the bug's file
    seen = _count_commands(monkeypatch)
    report = Validator(Settings(cache=False)).validate(artifact, source)
    assert not report.valid and report.runs == {}
    status = {c.name: c.status for c in report.checks}
    assert status["bug_scope"] == "failed" and status["applies"] == "passed"
    assert not any("test_script.sh" in c for c in seen)


def _count_opens(validator, monkeypatch) -> list[int]:
    opened = [0]
    real = validator.open

    def open_(source):
        opened[0] += 1
        return real(source)

    monkeypatch.setattr(validator, "open", open_)
    return opened


def test_an_idle_run_slot_makes_the_bug_weaken_run_alongside_the_original(artifact, source, monkeypatch):
    serial, parallel = Validator(Settings(cache=False, jobs=1)), Validator(Settings(cache=False, jobs=2))
    counts = _count_opens(serial, monkeypatch), _count_opens(parallel, monkeypatch)
    a, b = serial.validate(artifact, source), parallel.validate(artifact, source)
    assert a.valid and b.valid and set(a.runs) == set(b.runs) == {"bug", "original", "bug+weaken"}
    assert a.runs["bug+weaken"]["statuses"] == b.runs["bug+weaken"]["statuses"]
    assert [c[0] for c in counts] == [1, 2]  # the second slot's run had a sandbox of its own
    assert parallel.slots.idle == 2  # every slot given back


def test_a_run_made_ahead_for_a_check_that_never_comes_is_left_out_of_the_report(artifact, source):
    script = artifact.path / "test_script.sh"
    script.write_text(script.read_text().replace("tests/test_case.py", "tests/test_case.py tests/test_nope.py"))
    report = Validator(Settings(cache=False, jobs=2)).validate(artifact, source)
    status = {c.name: c.status for c in report.checks}
    assert not report.valid and status["parser"] == "failed" and status["weaken_hides"] == "skipped"
    assert "bug+weaken" not in report.runs


def test_a_run_made_ahead_shares_nothing_with_the_run_beside_it(artifact, source):
    """Hostile: tests that look for another run of themselves (files in /tmp, /dev/shm, the workspace, their
    processes) to behave differently when two run at once find nothing of the run made ahead."""
    _needs_bwrap()
    script = artifact.path / "test_script.sh"
    probe = ("mark=ssrkit-twin-$RANDOM$RANDOM; touch /tmp/$mark /dev/shm/$mark $mark; sleep 0.5; "
             "echo twins: $(ls /tmp /dev/shm . | grep -c ssrkit-twin-) procs: $(ls /proc | grep -c '^[0-9]')\n")
    script.write_text(script.read_text().replace("#!/usr/bin/env bash\n", "#!/usr/bin/env bash\n" + probe, 1))
    validator = Validator(Settings(cache=False, jobs=2))
    report = validator.validate(artifact, source)
    assert report.valid, report.checks
    logs = [line for name in ("original", "bug+weaken") for line in report.logs[f"logs/{name.replace('+', '-')}.log"]
            .splitlines() if line.startswith("twins:")]
    assert logs and all(line.split()[1] == "3" for line in logs), logs  # its own three marks, nobody else's


def test_an_original_run_that_cannot_import_a_module_says_which_and_what_to_do():
    from ssrkit.validate.checks import _missing_module_hint

    log = ("ERROR collecting tests/test_timed.py\nE   ModuleNotFoundError: No module named 'freezegun'\n"
           "E   ModuleNotFoundError: No module named 'freezegun'\n")
    hint = _missing_module_hint(log)
    assert "'freezegun'" in hint and hint.count("freezegun") == 1 and "activate the virtualenv" in hint
    assert _missing_module_hint("1 failed, 3 passed") == ""
