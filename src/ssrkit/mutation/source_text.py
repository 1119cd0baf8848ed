"""Python source text addressed by ast positions: minimal, formatting-preserving text edits.

`ast` gives line numbers (1-based) and UTF-8 *byte* columns; edits work on character offsets into the
file's text. `SourceText` converts between the two, finds operator tokens between operands (they are not
in the ast) and applies non-overlapping edits, so a mutation changes only the characters it means to.
The whole file is never regenerated with `ast.unparse`.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from functools import cached_property

from ..verdict import pyast


@dataclass(frozen=True)
class Edit:
    """Replace text[start:end] by `text` (character offsets)."""

    start: int
    end: int
    text: str


def apply_edits(text: str, edits: list[Edit] | tuple[Edit, ...]) -> str:
    """Apply non-overlapping edits (any order)."""
    out = text
    last = None
    for e in sorted(edits, key=lambda e: (e.start, e.end), reverse=True):
        if last is not None and e.end > last:
            raise ValueError("overlapping edits")
        out = out[:e.start] + e.text + out[e.end:]
        last = e.start
    return out


@dataclass(frozen=True)
class Token:
    type: int
    string: str
    start: int  # character offset
    end: int


class SourceText:
    """A module's text with its ast, line offsets and tokens."""

    def __init__(self, text: str, path: str = "<string>"):
        self.text = text
        self.path = path
        self.tree = pyast.parse(text, filename=path)
        self.lines = text.splitlines(keepends=True)
        self._starts = [0]
        for line in self.lines:
            self._starts.append(self._starts[-1] + len(line))

    # -- positions -------------------------------------------------------------------------------
    def offset(self, lineno: int, col_byte: int) -> int:
        """Character offset of (1-based line, UTF-8 byte column)."""
        if lineno - 1 >= len(self.lines):
            return len(self.text)
        line = self.lines[lineno - 1]
        if line.isascii():
            col = col_byte
        else:
            col = len(line.encode("utf-8")[:col_byte].decode("utf-8", errors="ignore"))
        return self._starts[lineno - 1] + col

    def start(self, node: ast.AST) -> int:
        return self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]

    def end(self, node: ast.AST) -> int:
        return self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]

    def segment(self, node: ast.AST) -> str:
        return self.text[self.start(node):self.end(node)]

    def line_start(self, lineno: int) -> int:
        return self._starts[lineno - 1]

    def line_end(self, lineno: int) -> int:
        """Offset just after the line's newline (or end of text)."""
        return self._starts[min(lineno, len(self.lines))]

    def line_of(self, offset: int) -> int:
        lo, hi = 0, len(self._starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def indent_of(self, lineno: int) -> str:
        line = self.lines[lineno - 1]
        return line[: len(line) - len(line.lstrip(" \t"))]

    def newline(self) -> str:
        for line in self.lines:
            if line.endswith("\r\n"):
                return "\r\n"
            if line.endswith("\n"):
                return "\n"
        return "\n"

    # -- tokens ----------------------------------------------------------------------------------
    @cached_property
    def tokens(self) -> list[Token]:
        out = []
        for tok in tokenize.generate_tokens(io.StringIO(self.text).readline):
            if tok.type in (tokenize.OP, tokenize.NAME):
                (sl, sc), (el, ec) = tok.start, tok.end
                out.append(Token(tok.type, tok.string, self._starts[sl - 1] + sc, self._starts[el - 1] + ec))
        return out

    def tokens_between(self, start: int, end: int) -> list[Token]:
        toks = self.tokens
        i = _bisect_tokens(toks, start)
        out = []
        while i < len(toks) and toks[i].end <= end:
            out.append(toks[i])
            i += 1
        return out

    # -- whole-line edits ------------------------------------------------------------------------
    def owns_lines(self, start: int, end: int) -> bool:
        """True when only whitespace precedes `start` on its line and only whitespace/comment follows `end`."""
        first = self.line_of(start)
        last = self.line_of(max(start, end - 1)) if end > start else first
        before = self.text[self.line_start(first):start]
        after = self.text[end:self.line_end(last)]
        return not before.strip() and (not after.strip() or after.strip().startswith("#"))

    def delete_lines(self, first: int, last: int) -> Edit:
        return Edit(self.line_start(first), self.line_end(last), "")


def _bisect_tokens(toks: list[Token], start: int) -> int:
    lo, hi = 0, len(toks)
    while lo < hi:
        mid = (lo + hi) // 2
        if toks[mid].start < start:
            lo = mid + 1
        else:
            hi = mid
    return lo


def node_first_line(node: ast.AST) -> int:
    """First line of a statement, decorators included."""
    decos = getattr(node, "decorator_list", None) or []
    return min([node.lineno] + [d.lineno for d in decos])  # type: ignore[attr-defined]
