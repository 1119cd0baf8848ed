"""`ast.parse`, one call at a time in this process.

CPython 3.11 keeps the AST converter's recursion depth in per-interpreter state, not per thread: two threads
parsing at once (validation, solving and injection run units on a thread pool) can make one of them fail with
`SystemError: AST constructor recursion depth mismatch`. Every parse in ssrkit goes through `parse`, which
holds a lock; a parse takes milliseconds, so the lock costs nothing that matters.
"""

from __future__ import annotations

import ast
import threading

_lock = threading.Lock()
_parse = ast.parse  # (tests put a slow one here)


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)`, serialized with every other parse of this process."""
    with _lock:
        return _parse(source, filename=filename)
