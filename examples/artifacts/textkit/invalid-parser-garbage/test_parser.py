#!/usr/bin/env python3
"""Summarise a pytest log (prints counts, not the per-test JSON map)."""
import re
import sys

log = sys.stdin.read()
counts = {word: len(re.findall(r"^" + word + r" ", log, re.M)) for word in ("PASSED", "FAILED", "ERROR")}
print("tests run:", sum(counts.values()))
for word, n in counts.items():
    print(f"{word.lower()}: {n}")
