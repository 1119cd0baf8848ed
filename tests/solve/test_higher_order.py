"""Higher-order artifacts from real failed attempts (SPEC §8)."""

from __future__ import annotations

from fixtures import calc_pkg
from fixtures.calc_pkg import CLAMP_ONLY, FIXED_DIFFERENTLY
from fixtures.solving import ScriptedSolver, validate
from ssrkit.store.artifact import Artifact
from ssrkit.solve.higher_order import known_artifacts, make_all
from ssrkit.solve import prepare_solver_sandbox
from ssrkit.solve.solvers import make_solver


def test_failed_attempts_become_valid_order_two_artifacts(engine, calc_artifact, tmp_path):
    art = calc_artifact
    src = art.metadata.repo
    # 001 passes; 002 and 003 make the same partial fix (003 also edits a test: dropped); 004 is empty;
    # 005 fixes only the median, in a second code file too
    engine.solve([(art, src)], ScriptedSolver({"src/calc/ops.py": FIXED_DIFFERENTLY}), attempts=1)
    engine.solve([(art, src)], ScriptedSolver({"src/calc/ops.py": CLAMP_ONLY}), attempts=2)
    engine.solve([(art, src)], ScriptedSolver({"src/calc/ops.py": CLAMP_ONLY,
                                               "tests/test_ops.py": lambda t: t + "\n# touched\n"}), attempts=3)
    engine.solve([(art, src)], make_solver("null"), attempts=4)
    median_only = calc_pkg.BUGGY_OPS.replace("        return s[mid]\n    return s[mid]\n",
                                         "        return s[mid]\n    return (s[mid - 1] + s[mid]) / 2\n")
    engine.solve([(art, src)], ScriptedSolver({"src/calc/ops.py": median_only,
                                               "src/calc/__init__.py": '"""calc: small numeric helpers."""\n'}),
                 attempts=5)
    out = tmp_path / "higher"
    outcomes = make_all([(art, src)], out, engine.open)
    by = {o.attempt: o for o in outcomes}
    assert by["001"].status == "skipped" and "passed" in by["001"].reason
    assert by["002"].status == "created"
    assert by["003"].status == "duplicate" and by["003"].id == by["002"].id
    assert by["004"].status == "skipped" and "no code" in by["004"].reason
    assert by["005"].status == "created"

    clamp_fixed = Artifact(by["002"].path)
    meta = clamp_fixed.metadata
    assert meta.order == 2 and meta.parent == art.id and meta.strategy == "higher_order"
    assert meta.extra["parent_attempt"] == "002" and meta.id == clamp_fixed.content_id()
    assert clamp_fixed.weaken_diff == art.weaken_diff and clamp_fixed.test_files == art.test_files
    assert "tests/" not in clamp_fixed.bug_diff

    result = validate(clamp_fixed)
    assert result["valid"], result
    assert result["fail_to_pass"] == ["tests/test_ops.py::test_median_even"]
    # the second one: the __init__ edit does not contribute to the bug, so it is invalid (inverse_mutation)
    other = validate(Artifact(by["005"].path))
    assert not other["valid"]
    assert next(c for c in other["checks"] if c["status"] == "failed")["name"] == "inverse_mutation"

    # the solver sandbox holds the stacked state: clamp fixed by the failed attempt, median still buggy
    with engine.open(src) as sb:
        prepare_solver_sandbox(sb, clamp_fixed)
        ops = sb.read_file("src/calc/ops.py").decode()
        assert ops == CLAMP_ONLY
        assert "test_median_even" not in sb.read_file("tests/test_ops.py").decode()
        assert sb.run("git log --oneline | wc -l", timeout=30).output.strip() == "1"
    [oracle] = engine.solve([(clamp_fixed, src)], make_solver("oracle"), attempts=1)
    assert oracle["passed"], oracle["reason"]

    # order 2 never goes higher; a second run finds the same artifacts again
    engine.solve([(clamp_fixed, src)], make_solver("null"), attempts=2)
    again = make_all([(clamp_fixed, src)], out, engine.open)
    assert [o.status for o in again] == ["skipped", "skipped"] and "order 2" in again[1].reason
    rerun = make_all([(art, src)], out, engine.open)
    assert {o.attempt: o.status for o in rerun}["002"] == "duplicate"

    # the next round, on a copy of the same task that failed the same way: what the earlier round made is
    # known, not made (nor validated, nor counted) again
    later = tmp_path / "round-2-higher"
    known = known_artifacts([out], later)
    assert set(known) == {by["002"].id, by["005"].id}
    carried = make_all([(art, src)], later, engine.open, known=known)
    made_before = {o.attempt: o for o in carried if o.reason.startswith("made before")}
    assert set(made_before) == {"002", "003", "005"} and all(o.status == "skipped" for o in made_before.values())
    assert not any(o.status in ("created", "duplicate") for o in carried)
    assert not later.exists() or not any(later.iterdir())
    assert known_artifacts([out], out) == {}  # --out itself is this run's own: never "made before"
