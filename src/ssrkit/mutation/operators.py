"""Bug operators: small, formatting-preserving edits of one function (SPEC §4, procedural injector).

Two families work inside a target function:

- `expression` — comparison, arithmetic and boolean swaps, `not` removal, off-by-one on integer constants,
  slice bounds and `range` stops, constant changes, argument drops;
- `removal` — a statement, an `if` branch (`if` without `else`, an `else` or `elif` clause), a loop, an
  early `return`/`break`/`continue`, or the whole body replaced by a minimal stub.

Every operator returns `Mutation`s: text edits located by ast positions, so only the mutated lines change.
Removals never leave an empty block or a telltale `pass` behind: a statement alone in an `if` body takes
the `if` with it, and anywhere else it is not a candidate. The same operators, applied at the most
suspicious lines of a buggy program, are the inverse mutations the `repair` baseline tries.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Iterator

from .source_text import Edit, SourceText, apply_edits, node_first_line
from ..verdict import pyast

EXPRESSION = "expression"
REMOVAL = "removal"

EXPRESSION_OPERATORS = ("compare_swap", "arith_swap", "bool_swap", "not_removal", "off_by_one",
                        "constant_change", "arg_drop")
REMOVAL_OPERATORS = ("stmt_removal", "branch_removal", "loop_removal", "early_return_removal", "body_stub")
#: inverse mutations tried by the `repair` baseline, most promising first
REPAIR = "repair"
REPAIR_OPERATORS = ("compare_swap", "bool_swap", "off_by_one", "arith_swap", "not_removal", "not_insertion",
                    "constant_change")
FAMILIES = {EXPRESSION: EXPRESSION_OPERATORS, REMOVAL: REMOVAL_OPERATORS, REPAIR: REPAIR_OPERATORS}


@dataclass(frozen=True)
class Function:
    """A function or method of a module: its qualified name and where it is."""

    qualname: str
    node: ast.FunctionDef | ast.AsyncFunctionDef = field(compare=False, repr=False)
    first_line: int  # the `def` line (decorators excluded)
    end_line: int

    @property
    def body_lines(self) -> range:
        """Lines of the body (what tests execute; the `def` line runs at import time)."""
        body = _strip_docstring(self.node.body) or self.node.body
        return range(body[0].lineno, self.end_line + 1)


@dataclass(frozen=True)
class Mutation:
    family: str
    operator: str
    path: str
    function: str
    line: int
    detail: str
    edits: tuple[Edit, ...]

    def apply(self, text: str) -> str:
        return apply_edits(text, self.edits)

    def describe(self) -> str:
        return f"{self.operator} at {self.path}:{self.line} in {self.function}: {self.detail}"


def functions(st: SourceText) -> list[Function]:
    """Every function and method with a body of real statements, in source order (nested ones included)."""
    out: list[Function] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = f"{prefix}{child.name}"
                if _strip_docstring(child.body):
                    out.append(Function(q, child, child.lineno, child.end_lineno or child.lineno))
                visit(child, q + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(child).__name__ == "TryStar":
                visit(child, prefix)  # functions defined under `if TYPE_CHECKING:`, `try:` ...

    visit(st.tree, "")
    out.sort(key=lambda f: (f.first_line, f.qualname))
    return out


def mutations(st: SourceText, func: Function, family: str, operators: tuple[str, ...] | None = None, *,
              checked: bool = True) -> list[Mutation]:
    """All mutations of one family (optionally only some operators) in a function, in source order.

    `checked=False` leaves out the check that each one changes the text and keeps the syntax (`mutated`):
    one parse of the whole module per mutation, which a caller drawing a few of thousands makes on draw."""
    ops = operators or FAMILIES[family]
    out: list[Mutation] = []
    gen = _Generator(st, func)
    for name in ops:
        if name not in FAMILIES[family]:
            continue
        for m in getattr(gen, name)():
            if m is not None:
                out.append(m)
    seen: set[tuple[Edit, ...]] = set()
    good = []
    for m in out:
        if m.edits in seen:
            continue
        seen.add(m.edits)
        if checked and mutated(st, m) is None:
            continue
        good.append(m)
    good.sort(key=lambda m: (ops.index(m.operator) if m.operator in ops else len(ops), m.line, m.edits[0].start, m.detail))
    return good


def mutated(st: SourceText, m: Mutation) -> str | None:
    """The module's text with `m` applied; None when that changes nothing or breaks the syntax."""
    new = m.apply(st.text)
    if new == st.text:
        return None
    try:
        pyast.parse(new)
    except SyntaxError:
        return None
    return new


def mutations_at_lines(st: SourceText, lines: set[int], families: tuple[str, ...] = (EXPRESSION,)) -> list[Mutation]:
    """Mutations whose edits start on one of `lines`, over every function (used by `repair`)."""
    out = []
    for func in functions(st):
        if not (set(range(func.first_line, func.end_line + 1)) & lines):
            continue
        for fam in families:
            out.extend(m for m in mutations(st, func, fam) if st.line_of(m.edits[0].start) in lines)
    return out


# -- helpers ----------------------------------------------------------------------------------------

def _strip_docstring(body: list[ast.stmt]) -> list[ast.stmt]:
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[1:]
    return body


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_BLOCK_FIELDS = ("body", "orelse", "finalbody", "handlers")


def _is_docstring(stmt: ast.stmt, parent_body: list[ast.stmt], is_func_body: bool) -> bool:
    return is_func_body and parent_body and stmt is parent_body[0] and isinstance(stmt, ast.Expr) \
        and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _expr_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Nodes under `node`, skipping nested definitions, annotations and f-strings."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        children = []
        for name, value in ast.iter_fields(n):
            if name in ("annotation", "returns", "type_comment", "decorator_list", "type_params"):
                continue
            items = value if isinstance(value, list) else [value]
            for c in items:
                if isinstance(c, ast.AST) and not isinstance(c, _NESTED) and not isinstance(c, ast.JoinedStr):
                    children.append(c)
        stack.extend(reversed(children))


_CMP_SWAP = {ast.Lt: "<=", ast.LtE: "<", ast.Gt: ">=", ast.GtE: ">", ast.Eq: "!=", ast.NotEq: "==",
             ast.Is: "is not", ast.IsNot: "is", ast.In: "not in", ast.NotIn: "in"}
_CMP_TEXT = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
             ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
_ARITH_SWAP = {"+": "-", "-": "+", "*": "/", "/": "*", "//": "/", "%": "//", "**": "*", "<<": ">>",
               ">>": "<<", "|": "&", "&": "|", "^": "|"}
_SIMPLE_EXPR = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


class _Generator:
    """Operator implementations over one function of one module."""

    def __init__(self, st: SourceText, func: Function):
        self.st = st
        self.func = func
        self.node = func.node
        body = _strip_docstring(func.node.body)
        self.nodes = [n for stmt in body if not isinstance(stmt, _NESTED) for n in _expr_nodes(stmt)]
        self.params = {a.arg for a in ast.walk(func.node.args) if isinstance(a, ast.arg)}

    def _mut(self, family: str, op: str, node_or_line: ast.AST | int, detail: str, edits: list[Edit]) -> Mutation:
        line = self.st.line_of(min(e.start for e in edits))
        if family == REMOVAL and not isinstance(node_or_line, int):
            line = node_or_line.lineno  # type: ignore[attr-defined]
        return Mutation(family, op, self.st.path, self.func.qualname, line, detail, tuple(edits))

    def _op_tokens(self, left: ast.AST, right: ast.AST) -> list:
        """The operator tokens between two operands (parentheses skipped)."""
        return [t for t in self.st.tokens_between(self.st.end(left), self.st.start(right))
                if t.string not in ("(", ")")]

    # -- expression operators --------------------------------------------------------------------
    def compare_swap(self) -> Iterator[Mutation]:
        for n in self.nodes:
            if not isinstance(n, ast.Compare):
                continue
            operands = [n.left, *n.comparators]
            for i, op in enumerate(n.ops):
                toks = self._op_tokens(operands[i], operands[i + 1])
                if not toks or " ".join(t.string for t in toks) != _CMP_TEXT[type(op)]:
                    continue
                new = _CMP_SWAP[type(op)]
                yield self._mut(EXPRESSION, "compare_swap", n, f"`{_CMP_TEXT[type(op)]}` -> `{new}`",
                                [Edit(toks[0].start, toks[-1].end, new)])

    def arith_swap(self) -> Iterator[Mutation]:
        for n in self.nodes:
            if isinstance(n, ast.BinOp):
                if _is_stringish(n.left) or _is_stringish(n.right) or _is_sequence_literal(n.left) \
                        or _is_sequence_literal(n.right):
                    continue
                toks = self._op_tokens(n.left, n.right)
                if len(toks) != 1 or toks[0].string not in _ARITH_SWAP:
                    continue
                old = toks[0].string
                yield self._mut(EXPRESSION, "arith_swap", n, f"`{old}` -> `{_ARITH_SWAP[old]}`",
                                [Edit(toks[0].start, toks[0].end, _ARITH_SWAP[old])])
            elif isinstance(n, ast.AugAssign):
                if _is_stringish(n.value) or _is_sequence_literal(n.value):
                    continue
                toks = self._op_tokens(n.target, n.value)
                if len(toks) != 1 or not toks[0].string.endswith("=") or toks[0].string[:-1] not in _ARITH_SWAP:
                    continue
                old = toks[0].string
                new = _ARITH_SWAP[old[:-1]] + "="
                yield self._mut(EXPRESSION, "arith_swap", n, f"`{old}` -> `{new}`",
                                [Edit(toks[0].start, toks[0].end, new)])

    def bool_swap(self) -> Iterator[Mutation]:
        for n in self.nodes:
            if not isinstance(n, ast.BoolOp):
                continue
            old, new = ("and", "or") if isinstance(n.op, ast.And) else ("or", "and")
            edits = []
            for a, b in zip(n.values, n.values[1:]):
                toks = self._op_tokens(a, b)
                if len(toks) != 1 or toks[0].string != old:
                    edits = []
                    break
                edits.append(Edit(toks[0].start, toks[0].end, new))
            if edits:
                yield self._mut(EXPRESSION, "bool_swap", n, f"`{old}` -> `{new}`", edits)

    def not_removal(self) -> Iterator[Mutation]:
        for n in self.nodes:
            if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
                start = self.st.start(n)
                if not self.st.text.startswith("not", start):
                    continue
                yield self._mut(EXPRESSION, "not_removal", n, "`not` removed",
                                [Edit(start, self.st.start(n.operand), "")])

    def off_by_one(self) -> Iterator[Mutation]:
        for n in self.nodes:
            if isinstance(n, ast.Constant) and type(n.value) is int:
                seg = self.st.segment(n)
                if not re.fullmatch(r"[0-9_]+|0[xXoObB][0-9a-fA-F_]+", seg):
                    continue
                for delta in (1, -1):
                    yield self._mut(EXPRESSION, "off_by_one", n, f"`{seg}` -> `{n.value + delta}`",
                                    [Edit(self.st.start(n), self.st.end(n), str(n.value + delta))])
            elif isinstance(n, ast.Slice):
                for bound in (n.lower, n.upper):
                    if bound is not None and not isinstance(bound, (ast.Constant, ast.UnaryOp)):
                        yield from self._shift(bound, "slice bound")
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "range" \
                    and 1 <= len(n.args) <= 3 and not n.keywords:
                stop = n.args[0] if len(n.args) == 1 else n.args[1]
                if not isinstance(stop, (ast.Constant, ast.UnaryOp, ast.Starred)):
                    yield from self._shift(stop, "range stop")

    def _shift(self, expr: ast.expr, what: str) -> Iterator[Mutation]:
        seg = self.st.segment(expr)
        for sign in ("+", "-"):
            if isinstance(expr, _SIMPLE_EXPR) or (isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv))):
                edits = [Edit(self.st.end(expr), self.st.end(expr), f" {sign} 1")]
                shown = f"{seg} {sign} 1"
            else:
                edits = [Edit(self.st.start(expr), self.st.start(expr), "("),
                         Edit(self.st.end(expr), self.st.end(expr), f") {sign} 1")]
                shown = f"({seg}) {sign} 1"
            if "\n" in seg:
                continue
            yield self._mut(EXPRESSION, "off_by_one", expr, f"{what} `{seg}` -> `{shown}`", edits)

    def constant_change(self) -> Iterator[Mutation]:
        for n in self.nodes:
            if not isinstance(n, ast.Constant):
                continue
            seg = self.st.segment(n)
            if isinstance(n.value, bool):
                new = "False" if n.value else "True"
                if seg != str(n.value):
                    continue
            elif isinstance(n.value, (str, bytes)):
                m = re.match(r"([rRbBuU]{0,2})('''|\"\"\"|'|\")", seg)
                if not m or "\n" in seg:
                    continue
                prefix, quote = m.group(1), m.group(2)[0]
                new = f"{prefix}{quote}{quote}" if n.value else f"{prefix}{quote} {quote}"
            elif isinstance(n.value, float):
                new = repr(n.value + 1.0)
            else:
                continue
            yield self._mut(EXPRESSION, "constant_change", n, f"`{seg}` -> `{new}`",
                            [Edit(self.st.start(n), self.st.end(n), new)])

    def not_insertion(self) -> Iterator[Mutation]:
        """Negate a condition (`if`, `while`, `assert`, conditional expression, operand of and/or)."""
        conds = []
        for n in self.nodes:
            if isinstance(n, (ast.If, ast.While, ast.IfExp, ast.Assert)):
                conds.append(n.test)
            elif isinstance(n, ast.BoolOp):
                conds.extend(n.values)
        for c in conds:
            if isinstance(c, ast.UnaryOp) and isinstance(c.op, ast.Not):
                continue
            seg = self.st.segment(c)
            if "\n" in seg:
                continue
            simple = isinstance(c, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant, ast.Compare))
            new = f"not {seg}" if simple else f"not ({seg})"
            yield self._mut(EXPRESSION, "not_insertion", c, f"`{seg}` -> `{new}`",
                            [Edit(self.st.start(c), self.st.end(c), new)])

    def arg_drop(self) -> Iterator[Mutation]:
        for n in self.nodes:
            if not isinstance(n, ast.Call):
                continue
            items = sorted([*n.args, *n.keywords], key=lambda a: (a.lineno, a.col_offset))
            if len(items) < 2:
                continue
            spans = [(self.st.start(a), self.st.end(a)) for a in items]
            callee = self.st.segment(n.func)
            if "\n" in callee or len(callee) > 40:
                callee = callee.split("(")[0][-40:]
            for k, item in enumerate(items):
                if k < len(items) - 1:
                    edit = Edit(spans[k][0], spans[k + 1][0], "")
                else:
                    edit = Edit(spans[k - 1][1], spans[k][1], "")
                shown = self.st.text[spans[k][0]:spans[k][1]]
                if "\n" in shown or len(shown) > 60:
                    shown = shown.splitlines()[0][:57] + "..."
                yield self._mut(EXPRESSION, "arg_drop", item, f"argument `{shown}` of `{callee}()` dropped", [edit])

    # -- removal operators -----------------------------------------------------------------------
    def _blocks(self) -> Iterator[tuple[ast.stmt, list[ast.stmt], list[tuple[ast.AST, list[ast.stmt]]]]]:
        """(statement, the block holding it, chain of (ancestor, its block)) for every statement."""
        def walk(block: list[ast.stmt], chain: list[tuple[ast.AST, list[ast.stmt]]]):
            for stmt in block:
                yield stmt, block, chain
                if isinstance(stmt, _NESTED):
                    continue
                for fname in _BLOCK_FIELDS:
                    sub = getattr(stmt, fname, None)
                    if not sub:
                        continue
                    if fname == "handlers":
                        for h in sub:
                            yield from walk(h.body, chain + [(stmt, block), (h, sub)])
                    else:
                        yield from walk(sub, chain + [(stmt, block)])
                for case in getattr(stmt, "cases", None) or []:
                    yield from walk(case.body, chain + [(stmt, block)])

        yield from walk(self.node.body, [])

    def _remove(self, stmt: ast.stmt, block: list[ast.stmt], chain: list) -> list[Edit] | None:
        """Edits deleting `stmt`; a statement alone in an `if` body takes the `if` with it."""
        others = [s for s in block if s is not stmt and not _is_docstring(s, block, block is self.node.body)]
        if not others:
            if not chain or block is self.node.body:
                return None
            parent, parent_block = chain[-1]
            if isinstance(parent, ast.If) and parent.body is block and not parent.orelse \
                    and not self._is_elif(parent, parent_block):
                return self._remove(parent, parent_block, chain[:-1])
            return None
        first, last = node_first_line(stmt), stmt.end_lineno or stmt.lineno
        if not self.st.owns_lines(self.st.start(stmt), self.st.end(stmt)):
            return None
        # a trailing comment on the last line goes with the statement; comments above it stay
        return [self.st.delete_lines(first, last)]

    def _is_elif(self, node: ast.If, block: list[ast.stmt]) -> bool:
        return self.st.text.startswith("elif", self.st.start(node))

    def stmt_removal(self) -> Iterator[Mutation]:
        assigned = _assignment_counts(self.node)
        for stmt, block, chain in self._blocks():
            if isinstance(stmt, ast.Expr):
                if _is_docstring(stmt, block, block is self.node.body) or isinstance(stmt.value, ast.Constant):
                    continue
                what = "call" if isinstance(stmt.value, ast.Call) else "expression"
            elif isinstance(stmt, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                if isinstance(stmt, ast.AnnAssign) and stmt.value is None:
                    continue
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
                # removing the only binding of a local name is a NameError, not a bug
                if any(nm not in self.params and assigned.get(nm, 0) < 2 for nm in names) \
                        and not isinstance(stmt, ast.AugAssign):
                    continue
                what = "assignment"
            elif isinstance(stmt, (ast.Raise, ast.Delete)):
                what = type(stmt).__name__.lower()
            else:
                continue
            edits = self._remove(stmt, block, chain)
            if edits:
                yield self._mut(REMOVAL, "stmt_removal", stmt, f"{what} `{_first_line(self.st, stmt)}` removed", edits)

    def branch_removal(self) -> Iterator[Mutation]:
        for stmt, block, chain in self._blocks():
            if not isinstance(stmt, ast.If):
                continue
            if self._is_elif(stmt, block):
                # an `elif` clause without its own else: delete the clause
                if stmt.orelse:
                    continue
                last = stmt.end_lineno or stmt.lineno
                if not self.st.owns_lines(self.st.start(stmt), self.st.end(stmt)):
                    continue
                yield self._mut(REMOVAL, "branch_removal", stmt, f"`{_first_line(self.st, stmt)}` clause removed",
                                [self.st.delete_lines(stmt.lineno, last)])
                continue
            if not stmt.orelse:
                if len(stmt.body) == 1 and isinstance(stmt.body[0], (ast.Return, ast.Break, ast.Continue)):
                    continue  # a guard clause: early_return_removal's site
                edits = self._remove(stmt, block, chain)
                if edits:
                    yield self._mut(REMOVAL, "branch_removal", stmt, f"`{_first_line(self.st, stmt)}` removed", edits)
                continue
            if len(stmt.orelse) == 1 and isinstance(stmt.orelse[0], ast.If) and self._is_elif(stmt.orelse[0], stmt.orelse):
                continue  # handled as an elif clause
            # drop the `else:` clause
            toks = [t for t in self.st.tokens_between(self.st.end(stmt.body[-1]), self.st.start(stmt.orelse[0]))
                    if t.string == "else"]
            if len(toks) != 1:
                continue
            else_line = self.st.line_of(toks[0].start)
            before = self.st.text[self.st.line_start(else_line):toks[0].start]
            last = stmt.orelse[-1].end_lineno or stmt.orelse[-1].lineno
            if before.strip() or not self.st.owns_lines(self.st.start(stmt.orelse[-1]), self.st.end(stmt.orelse[-1])):
                continue
            yield self._mut(REMOVAL, "branch_removal", else_line, f"`else` clause of `{_first_line(self.st, stmt)}` removed",
                            [self.st.delete_lines(else_line, last)])

    def loop_removal(self) -> Iterator[Mutation]:
        for stmt, block, chain in self._blocks():
            if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While)):
                edits = self._remove(stmt, block, chain)
                if edits:
                    yield self._mut(REMOVAL, "loop_removal", stmt, f"loop `{_first_line(self.st, stmt)}` removed", edits)

    def early_return_removal(self) -> Iterator[Mutation]:
        top = self.node.body
        for stmt, block, chain in self._blocks():
            if isinstance(stmt, ast.Return):
                if block is top and stmt is top[-1]:
                    continue  # the final return is not an early one
            elif not isinstance(stmt, (ast.Break, ast.Continue)):
                continue
            edits = self._remove(stmt, block, chain)
            if edits:
                yield self._mut(REMOVAL, "early_return_removal", stmt, f"`{_first_line(self.st, stmt)}` removed", edits)

    def body_stub(self) -> Iterator[Mutation]:
        if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in self.nodes):
            return  # a stub would silently turn a generator into a function
        body = _strip_docstring(self.node.body)
        if not body:
            return
        returns_value = any(isinstance(n, ast.Return) and n.value is not None for n in self.nodes)
        stub = "return None" if returns_value else "pass"
        if [type(s) for s in body] == [ast.Return] and stub == "return None" and \
                isinstance(body[0].value, ast.Constant) and body[0].value.value is None:
            return
        first, last = node_first_line(body[0]), body[-1].end_lineno or body[-1].lineno
        if first == self.node.lineno or not self.st.owns_lines(self.st.line_start(first) + len(self.st.indent_of(first)),
                                                              self.st.end(body[-1])):
            edits = [Edit(self.st.offset(first, body[0].col_offset), self.st.end(body[-1]), stub)]
        else:
            nl = self.st.newline()
            edits = [Edit(self.st.line_start(first), self.st.line_end(last), f"{self.st.indent_of(first)}{stub}{nl}")]
        yield self._mut(REMOVAL, "body_stub", body[0], f"body of `{self.func.qualname}` replaced by `{stub}`", edits)


def _first_line(st: SourceText, node: ast.AST) -> str:
    text = st.segment(node).splitlines()[0].strip() if st.segment(node) else ""
    return text if len(text) <= 60 else text[:57] + "..."


def _is_stringish(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def _is_sequence_literal(node: ast.AST) -> bool:
    return isinstance(node, (ast.List, ast.Tuple, ast.ListComp))


def _assignment_counts(func: ast.AST) -> dict[str, int]:
    """How many statements bind each local name (assignments, loops, with, imports...)."""
    counts: dict[str, int] = {}
    augmented = {id(n.target) for n in _expr_nodes(func) if isinstance(n, ast.AugAssign)}
    for n in _expr_nodes(func):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and id(n) not in augmented:
            counts[n.id] = counts.get(n.id, 0) + 1
    return counts
