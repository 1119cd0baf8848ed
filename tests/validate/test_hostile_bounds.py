"""Bounded output (issue 14): parser stderr, check messages, rendering time and terminal escapes; bounded
cost (issue 30): a parser that hangs or leaves a child behind, the budget of an artifact's test runs."""

from __future__ import annotations

import io
import json
import os
import time

import pytest
from rich.console import Console

from fixtures.small_calc import PARSER, PYTEST, check, make_artifact, validate
from ssrkit.text import MESSAGE_LIMIT

#: under xdist (`make test`): wall-clock bounds, never beside another such test
pytestmark = pytest.mark.xdist_group("timing")


def test_huge_parser_stderr_is_bounded(tmp_path, small_calc_repo):
    parser = "import sys\nsys.stderr.write('E' * (8 * 1024 * 1024))\nsys.exit(1)\n"
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser=parser)
    c = check(validate(art, small_calc_repo), "parser")
    assert c.status == "failed" and "exited with code 1" in c.message
    assert len(c.message) <= MESSAGE_LIMIT
    assert (art.path / "validation.json").stat().st_size < 200_000


def test_huge_test_ids_and_statuses_are_bounded(tmp_path, small_calc_repo):
    parser = "import json\nprint(json.dumps({'t' * 2_000_000: 'bogus' * 100_000}))\n"
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser=parser)
    c = check(validate(art, small_calc_repo), "parser")
    assert c.status == "failed" and "allowed:" in c.message and len(c.message) <= MESSAGE_LIMIT
    assert (art.path / "validation.json").stat().st_size < 200_000


def _render(result) -> str:
    from ssrkit.cli import validate as cli_validate

    buf = io.StringIO()
    old = cli_validate.console
    cli_validate.console = Console(file=buf, force_terminal=True, width=120)
    try:
        cli_validate.render_checks(result)
        cli_validate.render_summary([result])
    finally:
        cli_validate.console = old
    return buf.getvalue()


def test_terminal_escapes_in_test_ids_are_escaped(tmp_path, small_calc_repo):
    evil = "tests/x.py::test_\x1b]0;pwned\x07\x1b[2J\u202eevil"
    parser = f"import json\nprint(json.dumps({{{evil!r}: 'failed'}}))\n"
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser=parser)
    validate(art, small_calc_repo)
    result = json.loads((art.path / "validation.json").read_text())
    out = _render(result)
    assert "\x1b]0;pwned" not in out and "\x1b[2J" not in out and "\u202e" not in out and "\x07" not in out
    assert "\\x1b" in out


def test_rendering_long_messages_is_fast():
    msg = ("word " * 20_000)[:64 * 1024]
    result = {"artifact": "a", "valid": False, "seconds": 1.0, "fail_to_pass": [], "pass_to_pass": [],
              "warnings": [], "checks": [{"name": "parser", "status": "failed", "message": msg, "seconds": 0.1}]}
    t0 = time.monotonic()
    out = _render(result)
    assert time.monotonic() - t0 < 5
    assert "characters cut by ssrkit" in out


def test_isolation_in_force_is_reported(tmp_path, small_calc_repo):
    art = make_artifact(tmp_path, small_calc_repo, PYTEST)
    validate(art, small_calc_repo, cache=False)
    iso = json.loads((art.path / "validation.json").read_text())["settings"]["isolation"]
    assert iso["backend"] == "local" and iso["mechanism"] in ("bubblewrap", "unshare", "none")
    assert "memory" in iso and "network" in iso and isinstance(iso["not_isolated"], list)


# -- bounded cost (issue 30): a hostile parser costs its budget once, an artifact its budget ------------------

def _timed(art, repo, **section):
    """(the report, the seconds its validation took) under `[validate]` settings `section`."""
    from ssrkit.store.source import RepoSource
    from ssrkit.validate import Settings, Validator, write_report

    t0 = time.monotonic()
    report = Validator(Settings.from_section(section)).validate(art, RepoSource.local(repo))
    write_report(art, report)
    return report, time.monotonic() - t0


HANGS = "import sys, time\nsys.stdin.read()\ntime.sleep(1000)\n"


def test_a_parser_that_hangs_costs_one_parser_budget(tmp_path, small_calc_repo):
    """It hangs on the first log it gets (the bug run's, made with `applies`): the parser check fails at
    once, without a second run and a second hang on the original code's log."""
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser=HANGS)
    report, seconds = _timed(art, small_calc_repo, timeout=20, parser_timeout=2)
    c = check(report, "parser")
    assert c.status == "failed" and "did not finish within 2s on the bug run's log" in c.message, c.message
    assert "not run again" in c.message and list(report.runs) == ["bug"]
    assert seconds < 20, seconds  # one test run and one parse of 2s (today: a test budget, 60s and 30s, twice)
    assert report.budget["seconds"] == 4 * (20 + 2) and 0 < report.budget["used"] < 20


def test_a_parser_whose_child_keeps_stdout_open_is_judged_on_what_it_printed(tmp_path, small_calc_repo):
    """It prints its map and exits, leaving a `setsid` child that holds its stdout: the parse ends with the
    parser's own exit (both runs of the determinism check), and the child dies with the command."""
    child = ["sleep", f"1000.{os.getpid()}"]  # this test's own: no other test's `sleep 1000` is mistaken for it
    parser = PARSER + (f"\nimport subprocess\nsubprocess.Popen({child!r}, start_new_session=True, "
                       "stdin=subprocess.DEVNULL)\n")
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser=parser)
    report, seconds = _timed(art, small_calc_repo, timeout=20)
    assert report.valid, [c for c in report.checks if c.status == "failed"]
    assert seconds < 60, seconds  # today: the original run waits out 20 + 60 + 30 s, then "did not finish"
    assert not any(line.split() == child for line in _processes())


def _processes() -> list[str]:
    import subprocess

    return subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()


def test_the_budget_of_test_runs_ends_a_validation_and_says_so(tmp_path, small_calc_repo):
    art = make_artifact(tmp_path, small_calc_repo, "sleep 2; " + PYTEST)
    report, seconds = _timed(art, small_calc_repo, timeout=30, budget=3)
    first = report.first_failure
    assert first is not None and "budget of 3s of test runs is spent" in first.message, report.checks
    assert seconds < 15, seconds
    assert report.budget == {"seconds": 3, "used": report.budget["used"]} and report.budget["used"] < 5
    assert json.loads((art.path / "validation.json").read_text())["budget"]["seconds"] == 3


def test_a_parser_failing_on_a_later_log_fails_that_check(tmp_path, small_calc_repo):
    """A parser that breaks on the bug run's log does not make every test look failed (a 'valid' artifact)."""
    parser = ("import io, sys\nlog = sys.stdin.read()\nif 'assert -1 ==' in log:\n    raise SystemExit('cannot read this')\n"
              "sys.stdin = io.TextIOWrapper(io.BytesIO(log.encode()))\n" + PARSER)
    art = make_artifact(tmp_path, small_calc_repo, PYTEST, parser=parser)
    report, _ = _timed(art, small_calc_repo, timeout=30)
    first = report.first_failure
    assert first is not None and first.name == "bug_breaks" and "cannot read this" in first.message, report.checks
