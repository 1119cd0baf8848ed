"""`attempts/NNN/` is written only through store/attempts.py (#27 step 2.2): begin, the fix, the graded logs
and eval.json bound to the files it judged, an attempt made on another node received whole, eval.json last."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from ssrkit.errors import SsrkitError
from ssrkit.store.artifact import Artifact
from ssrkit.store.attempts import (FINISHED, as_received, attempt_dir, attempt_files, attempt_state, begin_attempt,
                                   eval_record, has_fix, read_fix, receive_attempt, write_fix, write_graded)

VERDICT = {"passed": True, "reason": "all 1 required test(s) pass", "tests": {"t": "PASSED"}, "exit_code": 0,
           "timed_out": False, "seconds": 1.5, "canary": None}


@pytest.fixture
def art(tmp_path):
    (tmp_path / "bug_inject.diff").write_text("x")
    return Artifact(tmp_path)


def test_begin_empties_the_attempt_and_refuses_a_linked_attempts_dir(art, tmp_path):
    d = begin_attempt(art, "001")
    (d / "old.log").write_text("from an earlier run")
    assert begin_attempt(art, "001") == d and list(d.iterdir()) == []
    other = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    other.mkdir()
    (tmp_path / "attempts").rename(other / "attempts")
    (tmp_path / "attempts").symlink_to(other / "attempts")
    with pytest.raises(SsrkitError, match="symlink"):
        begin_attempt(art, "002")


def test_a_graded_attempt_is_bound_to_its_fix_and_a_regrade_drops_the_old_canary_log(art):
    begin_attempt(art, "001")
    write_fix(art, "001", "--- a/x\n+++ b/x\n")
    record = eval_record(VERDICT, solver="oracle", attempt="001", artifact=art, solver_info={"name": "oracle"})
    written = write_graded(art, "001", "the log", "the canary log", record)
    d = attempt_dir(art, "001")
    assert (d / "test_output.log").read_text() == "the log"
    assert (d / "canary_output.log").read_text() == "the canary log"
    assert json.loads((d / "eval.json").read_text()) == written
    assert written["fix_sha256"] == hashlib.sha256(b"--- a/x\n+++ b/x\n").hexdigest()
    assert written["content_id"] == art.content_id()
    assert attempt_state(art, d)[0] == FINISHED
    write_graded(art, "001", "again", "", record)  # a regrade without a canary run
    assert not (d / "canary_output.log").exists()


def test_eval_record_keeps_its_field_order():
    """eval.json's first fields say who made the fix; the verdict follows; when and by which ssrkit last."""
    class Art:
        path, id = "/a", "abc"

    record = eval_record(VERDICT, solver="llm", attempt="002", artifact=Art(), solver_info=None)
    assert list(record) == ["passed", "reason", "tests", "exit_code", "solver", "attempt", "artifact", "artifact_id",
                            "timed_out", "seconds", "canary", "solver_info", "graded", "ssrkit_version"]
    assert record["solver_info"] == {} and record["artifact"] == "/a"


def test_read_fix_reads_at_most_the_limit_and_none_when_there_is_no_fix(art):
    begin_attempt(art, "001")
    assert read_fix(art, "001") is None and not has_fix(art, "001")
    write_fix(art, "001", "abc\N{SNOWMAN}def")
    assert has_fix(art, "001")
    assert read_fix(art, "001") == "abc\N{SNOWMAN}def"
    assert read_fix(art, "001", limit=4) == "abc\N{REPLACEMENT CHARACTER}"  # the snowman's first byte only


def test_an_attempt_made_elsewhere_is_received_whole_and_bound_to_the_fix_as_it_arrives(art):
    begin_attempt(art, "001")
    (attempt_dir(art, "001") / "stale.log").write_text("left by an earlier run")
    record = {**eval_record(VERDICT, solver="repair", attempt="001", artifact=art), "fix_sha256": "node's"}
    files = as_received(record, {"fix.diff": b"the fix\n", "test_output.log": b"log"})
    assert record["fix_sha256"] == hashlib.sha256(b"the fix\n").hexdigest()
    assert json.loads(files["eval.json"]) == record
    receive_attempt(art, "001", files)
    assert attempt_files(art, "001") == files  # nothing of the earlier run is left
    d = attempt_dir(art, "001")
    assert os.stat(d / "eval.json").st_mtime_ns >= max(os.stat(d / n).st_mtime_ns for n in files)
