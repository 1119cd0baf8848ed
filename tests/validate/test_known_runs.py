"""What a caller hands to validation and what the report says back: a run already made (`known=`), and
whether the original run came from the cache (`Report.original_cached`, not a sentence in the notes)."""

from __future__ import annotations

import pytest

from ssrkit.artifact import Artifact
from ssrkit.source import RepoSource
from ssrkit import testrun
from ssrkit.validate import Settings, Validator

from fixtures.repos import EXAMPLES, copy_artifact

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
