"""Bounded output (issue 14): parser stderr, check messages, rendering time and terminal escapes."""

from __future__ import annotations

import io
import json
import time

from rich.console import Console

from fixtures.small_calc import PYTEST, check, make_artifact, validate
from ssrkit.text import MESSAGE_LIMIT


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
