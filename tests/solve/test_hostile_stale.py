"""Stale verdicts and rewards (issue 26.3): a verdict or a reward counts only while it provably belongs to the
present files; one without the binding counts as stale. On both example repositories (textkit: pytest; ledger:
unittest)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures.paths import EXAMPLES
from fixtures.repos import copy_artifact
from fixtures.solving import make_engine, validate
from ssrkit.store.artifact import Artifact
from ssrkit.store.attempts import current_reward, scored_attempts, write_reward
from ssrkit.errors import SsrkitError
from ssrkit.solve.solvers import make_solver
from ssrkit.store.source import RepoSource
from ssrkit.store import trajectory as trajectories
from ssrkit.train.rollouts import scan_artifact

NAMES = ["textkit/valid-two-files-acronym-and-default-filter", "ledger/valid-journal-as-of-boundary"]


@pytest.fixture(scope="module")
def validated(tmp_path_factory, example_repos) -> dict[str, tuple[Artifact, RepoSource]]:
    tmp = tmp_path_factory.mktemp("stale")
    out = {}
    for name in NAMES:
        art = Artifact(copy_artifact(EXAMPLES / "artifacts" / name, tmp / "arts" / name.replace("/", "-")))
        source = RepoSource.local(example_repos[name.split("/")[0]])
        assert validate(art, source)["valid"]
        out[name] = (art, source)
    return out


def fresh_copy(validated, name: str, tmp_path: Path) -> tuple[Artifact, RepoSource]:
    art, source = validated[name]
    return Artifact(shutil.copytree(art.path, tmp_path / "art")), source


@pytest.mark.parametrize("name", NAMES)
def test_a_reward_of_a_verdict_since_regraded_is_not_paid(validated, name, tmp_path):
    """The oracle's attempt passes and `ssrkit reward` pays it +1; then its fix.diff is regraded as a failure
    (here: the fix replaced by nothing). Training reads −1 for it, and no injector reward from the stale
    reward.json."""
    art, source = fresh_copy(validated, name, tmp_path)
    engine = make_engine()
    [rec] = engine.solve([(art, source)], make_solver("oracle"), attempts=1)
    assert rec["passed"], rec["reason"]
    assert write_reward(art, 0.8)["solver_rewards"] == [1.0]
    attempt = art.path / "attempts" / "001"
    ended = {"format": trajectories.FORMAT, "messages": [], "exit_status": trajectories.SUBMITTED}
    (attempt / "trajectory.json").write_text(json.dumps(ended))
    (art.path / "trajectory.json").write_text(json.dumps(ended))
    assert {r.role: r.reward for r in scan_artifact(art.path).rollouts} == {"solver": 1.0, "injector": -0.8}

    (attempt / "fix.diff").write_text("")
    [again] = engine.regrade([(art, source)])
    assert not again["passed"]
    assert json.loads((art.path / "reward.json").read_text())["solver_rewards"] == [1.0]  # what it still says
    assert [(s.reward, s.source) for s in scored_attempts(art)] == [(-1.0, "eval.json")]
    scan = scan_artifact(art.path)
    assert [(r.role, r.reward) for r in scan.rollouts] == [("solver", -1.0)]
    assert scan.skipped["injector trajectory whose reward.json is stale (rerun ssrkit reward)"] == 1
    assert current_reward(art) is None
    assert write_reward(art, 0.8)["solver_rewards"] == [-1.0] and current_reward(art) is not None


@pytest.mark.parametrize("name", NAMES)
def test_a_verdict_of_other_files_is_stale(validated, name, tmp_path):
    """An attempt graded before the artifact's test script changed, or whose fix.diff changed since, or whose
    eval.json records no binding (as before this check): never rewarded, redone by the next solve."""
    art, source = fresh_copy(validated, name, tmp_path)
    make_engine().solve([(art, source)], make_solver("oracle"), attempts=1)
    ev_path = art.path / "attempts" / "001" / "eval.json"
    ev = json.loads(ev_path.read_text())
    assert [(s.reward, s.source) for s in scored_attempts(art)] == [(1.0, "eval.json")]
    for key in ("content_id", "fix_sha256"):
        ev_path.write_text(json.dumps({k: v for k, v in ev.items() if k != key}))
        assert [(s.reward, s.source) for s in scored_attempts(art)] == [(None, "stale")]
    ev_path.write_text(json.dumps(ev))
    with open(art.path / "attempts" / "001" / "fix.diff", "a") as fh:
        fh.write("\n")
    assert [(s.reward, s.source) for s in scored_attempts(art)] == [(None, "stale")]
    with pytest.raises(SsrkitError, match="no finished attempt; attempt\\(s\\) 001 judged other files"):
        write_reward(art, 0.8)
    from ssrkit.store.attempts import plan_attempts

    assert plan_attempts(art, 1) == ["001"]


HARMLESS = ("diff --git a/HARMLESS.txt b/HARMLESS.txt\nnew file mode 100644\nindex 0000000..8baef1b\n"
            "--- /dev/null\n+++ b/HARMLESS.txt\n@@ -0,0 +1 @@\n+nothing\n")


@pytest.mark.parametrize("name", NAMES)
def test_a_validation_without_its_binding_grades_nothing(validated, name, tmp_path):
    """The artifact's bug_inject.diff replaced after its validation (by one that breaks no test) and
    validation.json's content_id removed: the empty fix is not graded against FAIL_TO_PASS tests the artifact
    no longer breaks; solve says to validate it first."""
    art, source = fresh_copy(validated, name, tmp_path)
    (art.path / "bug_inject.diff").write_text(HARMLESS)
    data = json.loads((art.path / "validation.json").read_text())
    del data["content_id"]
    (art.path / "validation.json").write_text(json.dumps(data))
    with pytest.raises(SsrkitError, match="not made from its present files; validate it first"):
        make_engine().solve([(art, source)], make_solver("null"), attempts=1)
    assert not (art.path / "attempts").exists()


def test_a_size_bomb_in_an_attempt_is_never_read_whole(engine, calc_artifact):
    """A 900 MB sparse fix.diff left in an attempt directory: its regrade reads no more than the diff limit
    (the verdict: too large), and checking the attempt's binding streams it."""
    import resource

    d = calc_artifact.path / "attempts" / "001"
    d.mkdir(parents=True)
    with open(d / "fix.diff", "wb") as fh:
        fh.truncate(900 * 1024 * 1024)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    [rec] = engine.regrade([(calc_artifact, calc_artifact.metadata.repo)])
    assert not rec["passed"] and "too large" in rec["reason"]
    assert [s.source for s in scored_attempts(calc_artifact)] == ["eval.json"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 300 * 1024  # KiB
