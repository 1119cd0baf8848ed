"""cli.progress: a bar on a terminal; in a log, a plain line at most every EVERY seconds."""

from __future__ import annotations

import io

from rich.console import Console

import ssrkit.cli.progress as progress


def consoles(terminal: bool) -> tuple[Console, Console, io.StringIO]:
    err = io.StringIO()
    return Console(file=io.StringIO(), force_terminal=terminal), Console(file=err, width=200), err


def test_a_log_gets_a_line_at_most_every_EVERY_seconds(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: clock[0])
    out, err_console, err = consoles(terminal=False)
    with progress.progress("validate", 4, out, err_console) as t:
        t.update(advance=1, description="a")  # 0 s: too soon
        clock[0] += 31
        t.update(advance=1, description="b\x1b[31m")  # a line
        clock[0] += 10
        t.update(advance=1, description="c")  # too soon again
        clock[0] += 60
        t.update(description="d [bold]")
    assert err.getvalue().splitlines() == ["validate: 2/4, 31s — b\\x1b[31m", "validate: 3/4, 1m41s — d [bold]"]


def test_a_terminal_gets_the_bar_and_no_lines_notes_go_to_stderr():
    out, err_console, err = consoles(terminal=True)
    with progress.progress("solve", None, out, err_console) as t:
        t.update(advance=1, description="x")
        t.note("kept")
    assert err.getvalue() == "note: kept\n" and "kept" not in out.file.getvalue()
