"""Bounded, printable text: what untrusted strings (test ids, parser stderr, check messages) become before
they are stored in a report or reach a terminal."""

from __future__ import annotations

import re

from .verdict.text import MESSAGE_LIMIT, clip  # noqa: F401 - bounded text is the verdict's (exported tasks keep it too)


# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides that reorder what is shown
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character written as an escape (`\\x1b`, `\\u202e`), so that printing it
    cannot move the cursor, retitle the window, clear the screen or reorder the line."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}",
                        text)


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable_json(text: str) -> str:
    """JSON text (already escaping C0 controls) with the remaining control characters written as \\u escapes (\\u009b)."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
