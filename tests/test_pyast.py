"""`pyast.parse` runs one parse at a time in the process (CPython 3.11's AST converter keeps its recursion
depth per interpreter: two threads parsing at once can fail with "AST constructor recursion depth
mismatch", as a `--jobs 2` solve did once in a full test run)."""

from __future__ import annotations

import ast
import threading
import time

from ssrkit.verdict import pyast


def test_parses_from_many_threads_never_overlap(monkeypatch):
    inside, most = [0], [0]
    lock = threading.Lock()
    real = pyast._parse

    def slow_parse(source, filename="<unknown>"):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)  # a thread switch in the middle of a parse
        try:
            return real(source, filename=filename)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(pyast, "_parse", slow_parse)
    trees = []
    threads = [threading.Thread(target=lambda: trees.append(pyast.parse("x = 1\n", filename="x.py")))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(trees) == 6 and all(isinstance(t.body[0], ast.Assign) for t in trees)
    assert most[0] == 1
