"""Attempt bookkeeping: N attempts, idempotent; unfinished ones are redone first; --redo."""

from ssrkit.store.artifact import Artifact
from ssrkit.store.attempts import claim_new_attempt, plan_attempts

from fixtures.repos import finish_attempt


def make(tmp_path, finished, unfinished):
    (tmp_path / "bug_inject.diff").write_text("x")
    for name in finished + unfinished:
        d = tmp_path / "attempts" / name
        d.mkdir(parents=True)
        if name in finished:
            finish_attempt(tmp_path, name, {"passed": False})
    return Artifact(tmp_path)


def test_plan_attempts(tmp_path):
    art = make(tmp_path, ["001", "004"], ["002"])
    assert plan_attempts(art, 2) == []
    assert plan_attempts(art, 1) == []
    assert plan_attempts(art, 3) == ["002"]
    assert plan_attempts(art, 5) == ["002", "003", "005"]  # a gap (a deleted attempt) is redone by its name
    assert plan_attempts(art, 2, redo=True) == ["001", "002"]
    assert plan_attempts(art, 0) == []


def test_an_interrupted_solve_is_finished_under_the_names_an_uninterrupted_one_had(tmp_path):
    """Two attempts at once, stopped after 002 was made and before 001 was: the rerun makes 001 and 002
    (each is seeded by its number), not 002 and 003."""
    art = make(tmp_path, [], ["002"])
    assert plan_attempts(art, 2) == ["001", "002"]
    assert plan_attempts(art, 1) == ["002"]  # the begun one first


def test_claim_new_attempt_is_after_every_existing_one(tmp_path):
    art = make(tmp_path, ["001"], ["003"])
    assert claim_new_attempt(art) == "004"
    assert claim_new_attempt(art) == "005"
    assert (tmp_path / "attempts" / "005").is_dir()
