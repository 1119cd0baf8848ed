"""One reader of `/proc/PID/stat` for the sandbox's process helpers.

The command name (field 2) may hold spaces and parentheses, so the fields are read after its last `)`.
(`_guardian.py` and the exported grader keep their own copies: they run as standalone files.)
"""

from __future__ import annotations


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of `/proc/PID/stat` after the command name (state first, then ppid, pgrp, session, …;
    `flags` is index 6), or None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()
