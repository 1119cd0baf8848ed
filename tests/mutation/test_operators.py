"""Operators: each family finds its sites and edits only the mutated lines, keeping the file's formatting."""

from __future__ import annotations

import ast
import difflib

import pytest

from ssrkit.mutation.operators import (EXPRESSION, EXPRESSION_OPERATORS, REMOVAL, REMOVAL_OPERATORS, REPAIR,
                                     functions, mutations)
from ssrkit.mutation.source_text import SourceText

SAMPLE = '''import os  # odd   spacing is kept


def clamp(x,lo ,  hi):
    """Clamp x (a docstring is never mutated: "<")."""
    if x<lo:   # trailing comment
        return lo
    elif (x >
          hi):
        return hi
    total = 0
    for i in range( len(lo) ):
        total += i*2
        if i == 3 and not x:
            continue
    items = sorted(x, key=len, reverse=True)
    label = "sep: é"
    s = "-".join(items[:hi])
    x = x.strip()
    while x:
        x = x[1:]
    if x is None:
        raise ValueError("no x")
    else:
        x = x or ""
    return max(lo, min(x, hi))


class Thing:
    def method(self, a):
        self.a = a
        print("hello", a)
        return a + 1

    def gen(self):
        yield 1

    async def fetch(self, n):
        if n > 0:
            return n
        return -n
'''


def changed_lines(old: str, new: str) -> tuple[set[int], list[str]]:
    """Lines of `old` that differ, and the added lines."""
    removed, added = set(), []
    sm = difflib.SequenceMatcher(None, old.splitlines(keepends=True), new.splitlines(keepends=True))
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            removed.update(range(i1 + 1, i2 + 1))
            added.extend(new.splitlines(keepends=True)[j1:j2])
    return removed, added


def all_mutations(text: str, family: str):
    st = SourceText(text, "m.py")
    return st, [m for f in functions(st) for m in mutations(st, f, family)]


@pytest.mark.parametrize("family,operators", [(EXPRESSION, EXPRESSION_OPERATORS), (REMOVAL, REMOVAL_OPERATORS)])
def test_every_operator_finds_sites(family, operators):
    _, muts = all_mutations(SAMPLE, family)
    assert {m.operator for m in muts} == set(operators)


@pytest.mark.parametrize("family", [EXPRESSION, REMOVAL, REPAIR])
def test_only_the_mutated_lines_change(family):
    st, muts = all_mutations(SAMPLE, family)
    assert muts
    for m in muts:
        new = m.apply(SAMPLE)
        ast.parse(new)
        removed, added = changed_lines(SAMPLE, new)
        assert removed, m.describe()
        node_lines = set()
        for e in m.edits:
            node_lines.update(range(st.line_of(e.start), st.line_of(max(e.start, e.end - 1)) + 1))
        if m.operator == "body_stub":
            func = next(f for f in functions(st) if f.qualname == m.function)
            node_lines = set(range(func.first_line + 1, func.end_line + 1))
        assert removed <= node_lines | {max(node_lines) + 1}, (m.describe(), removed, node_lines)
        if family == EXPRESSION:
            assert len(new.splitlines()) == len(SAMPLE.splitlines()), m.describe()
            assert len(added) == len(removed)
        if m.operator != "body_stub":
            assert not any(line.strip() == "pass" for line in added), m.describe()
        # the docstring is never touched
        assert '"""Clamp x (a docstring is never mutated: "<")."""' in new


def test_examples_of_expression_edits():
    _, muts = all_mutations(SAMPLE, EXPRESSION)
    edits = {(m.operator, m.detail) for m in muts}
    for expected in [("compare_swap", "`<` -> `<=`"), ("compare_swap", "`>` -> `>=`"),
                     ("compare_swap", "`is` -> `is not`"), ("arith_swap", "`+=` -> `-=`"),
                     ("arith_swap", "`*` -> `/`"), ("bool_swap", "`and` -> `or`"),
                     ("bool_swap", "`or` -> `and`"), ("not_removal", "`not` removed"),
                     ("constant_change", "`True` -> `False`"), ("constant_change", '`"-"` -> `""`'),
                     ("constant_change", '`""` -> `" "`')]:
        assert expected in edits, expected
    details = {d for op, d in edits if op == "off_by_one"}
    assert "range stop `len(lo)` -> `len(lo) - 1`" in details
    assert "slice bound `hi` -> `hi + 1`" in details
    assert "`3` -> `4`" in details
    assert any(op == "arg_drop" and "reverse=True" in d for op, d in edits)


def test_string_concatenation_and_fstrings_are_not_arithmetic_sites():
    text = 'def f(a, n):\n    s = "x" + a\n    t = f"{n + 1}"\n    return s + t, n + 1\n'
    _, muts = all_mutations(text, EXPRESSION)
    swaps = [m for m in muts if m.operator == "arith_swap"]
    assert [m.apply(text).splitlines()[3] for m in swaps] == ["    return s - t, n + 1", "    return s + t, n - 1"]


def test_exact_text_of_a_multiline_comparison_swap():
    st, muts = all_mutations(SAMPLE, EXPRESSION)
    m = next(m for m in muts if m.operator == "compare_swap" and m.detail == "`>` -> `>=`")
    new = m.apply(SAMPLE)
    assert "    elif (x >=\n          hi):\n" in new
    m = next(m for m in muts if m.operator == "compare_swap" and m.detail == "`<` -> `<=`")
    assert "    if x<=lo:   # trailing comment\n" in m.apply(SAMPLE)


def test_removals_take_an_if_with_its_only_statement_and_never_leave_pass():
    _, muts = all_mutations(SAMPLE, REMOVAL)
    by = {(m.operator, m.detail): m for m in muts}
    m = by[("early_return_removal", "`continue` removed")]
    new = m.apply(SAMPLE)
    assert "if i == 3 and not x:" not in new and "continue" not in new  # the guard went with it
    m = by[("branch_removal", "`else` clause of `if x is None:` removed")]
    new = m.apply(SAMPLE)
    assert 'x = x or ""' not in new and 'raise ValueError("no x")' in new
    stub = next(m for m in muts if m.operator == "body_stub" and m.function == "Thing.method")
    assert "        return None\n" in stub.apply(SAMPLE)
    # generators are never stubbed (it would silently turn them into plain functions)
    assert not any(m.operator == "body_stub" and m.function == "Thing.gen" for m in muts)
    # the final return is not an "early" return
    assert not any(m.operator == "early_return_removal" and "max(lo" in m.detail for m in muts)


def test_crlf_and_non_ascii_columns_are_kept():
    text = 'def f(a, b):\r\n    s = "é" + a\r\n    return s if a < b else b\r\n'
    st, muts = all_mutations(text, EXPRESSION)
    m = next(m for m in muts if m.operator == "compare_swap")
    assert m.apply(text) == 'def f(a, b):\r\n    s = "é" + a\r\n    return s if a <= b else b\r\n'
    stub = next(m for m in all_mutations(text, REMOVAL)[1] if m.operator == "body_stub")
    assert stub.apply(text) == "def f(a, b):\r\n    return None\r\n"


def test_removing_the_only_binding_of_a_local_is_not_offered():
    text = "def f(x):\n    y = x * 2\n    return y\n\n\ndef g(x):\n    x = x.strip()\n    return x\n"
    _, muts = all_mutations(text, REMOVAL)
    removed = {m.detail for m in muts if m.operator == "stmt_removal"}
    assert removed == {"assignment `x = x.strip()` removed"}
