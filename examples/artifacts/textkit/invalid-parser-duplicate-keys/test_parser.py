#!/usr/bin/env python3
"""Collect test statuses from a `pytest -rA -v` log.

Writes the JSON by hand, one member per status line. Every test appears in the
progress lines and again in the short summary, so each key is written twice.
"""
import re
import sys

STATUS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}
members = []
for line in sys.stdin.read().splitlines():
    progress = re.match(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)\b", line)
    summary = re.match(r"^(PASSED|FAILED|ERROR) (\S+::\S+)", line)
    if progress:
        members.append((progress.group(1), STATUS[progress.group(2)]))
    elif summary:
        members.append((summary.group(2), STATUS[summary.group(1)]))
print("{" + ", ".join('"%s": "%s"' % (test, status) for test, status in members) + "}")
