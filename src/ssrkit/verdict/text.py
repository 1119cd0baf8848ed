"""Bounded text: what an untrusted string (a test id, a parser's output, a reason) becomes before it is kept."""

from __future__ import annotations

#: longest check message, grade reason or parser error kept (head and tail beyond it)
MESSAGE_LIMIT = 4096


def clip(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """`text` if it fits in `limit` characters, else its head and tail with a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    half = max(limit // 2 - 40, 1)
    return f"{text[:half]} […{len(text) - 2 * half} characters cut by ssrkit…] {text[-half:]}"
