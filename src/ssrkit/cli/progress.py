"""The progress of a long command: a bar on a terminal, plain lines in a log.

A bar redraws itself, so on a terminal it is the whole story. Where stdout or stderr is a file, a pipe or a
CI log, Rich draws nothing at all, and a 15-minute `inject` used to print two notes and then nothing until it
ended. There `Ticker` writes one plain line to stderr at most every `EVERY` seconds (what is done, the
latest step, the time so far), so a log shows the run is alive and where it is, without a line per step.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Optional

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from ..text import MESSAGE_LIMIT, clip, printable

EVERY = 30.0  # seconds between two progress lines in a log


class Ticker:
    """What a command tells about its progress: `update` the count and the latest step, `note` a line to
    keep (stderr). Texts are plain and may be untrusted (a model's words, an artifact's name): control
    characters and markup are escaped here, and lengths bounded."""

    def __init__(self, label: str, total: Optional[int], err_console: Console, bar: Optional[Progress]):
        self.label, self.total, self.completed, self.description = label, total, 0, ""
        self._err, self._bar = err_console, bar
        self._task: Optional[TaskID] = bar.add_task("", total=total) if bar is not None else None
        self._start = self._last = time.monotonic()

    def update(self, *, completed: Optional[int] = None, advance: int = 0, description: Optional[str] = None) -> None:
        self.completed = (self.completed if completed is None else completed) + advance
        if description is not None:
            self.description = printable(clip(description, MESSAGE_LIMIT))
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, completed=self.completed, description=escape(self.description))
            return
        now = time.monotonic()
        if now - self._last >= EVERY:
            self._last = now
            self._err.print(self.line(now), markup=False, highlight=False, soft_wrap=True)

    def note(self, text: str) -> None:
        """A line to keep, on stderr with the other diagnostics (so stdout stays the command's result); on a
        terminal it shows above the bar."""
        self._err.print(f"[dim]note:[/] {escape(printable(clip(text, MESSAGE_LIMIT)))}", highlight=False)

    def line(self, now: float) -> str:
        done = f"{self.completed}/{self.total}" if self.total is not None else f"{self.completed} done"
        secs = int(now - self._start)
        elapsed = f"{secs // 60}m{secs % 60:02d}s" if secs >= 60 else f"{secs}s"
        return f"{self.label}: {done}, {elapsed}" + (f" — {self.description}" if self.description else "")


@contextmanager
def progress(label: str, total: Optional[int], console: Console, err_console: Console) -> Iterator[Ticker]:
    """A bar on `console` when it is a terminal (gone when the command ends), else progress lines on
    `err_console` now and then."""
    if not console.is_terminal:
        yield Ticker(label, total, err_console, None)
        return
    with Progress(TextColumn(f"[bold]{escape(label)}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as bar:
        yield Ticker(label, total, err_console, bar)
