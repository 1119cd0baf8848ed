"""Test weakening: delete exactly the test functions that a bug makes fail (SPEC §4).

Each failing test id is located (file, enclosing classes, function); the whole `def` goes — decorators,
comment lines attached above it and the blank lines that separated it from the previous definition —
so the file reads as if the test had never been written. A parametrized test that fails for some of
its parameters is removed whole. A class left without tests (only `setUp` or helpers, and not used
elsewhere in the module) is removed too. Nothing is commented
out, and every other line of the file is kept byte for byte.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass
from typing import Callable, Iterable

from .runner import TestLocation
from ..mutation.source_text import Edit, SourceText, apply_edits, node_first_line
from ..verdict import pyast


class WeakenError(ValueError):
    """A failing test cannot be removed (not found, or not a function definition)."""


@dataclass
class _Target:
    node: ast.AST
    block: list[ast.stmt]


def removable(tree: ast.Module, loc: TestLocation) -> bool:
    """Whether `remove_tests` finds the definition of the test at `loc` in the module parsed as `tree` (a test
    generated at run time, e.g. attached with setattr from data files, has none)."""
    try:
        _find(tree, loc)
    except WeakenError:
        return False
    return True


def _find(tree: ast.Module, loc: TestLocation) -> _Target:
    block: list[ast.stmt] = tree.body
    classes: list[ast.ClassDef] = []
    for name in loc.classes:
        cls = next((n for n in block if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None:
            raise WeakenError(f"class {name} not found in {loc.file}")
        classes.append(cls)
        block = cls.body
    func = _find_def(block, loc.name)
    if func is None and classes:
        # inherited test: look through the base classes defined in the same module
        func_block = _find_in_bases(tree.body, classes[-1], loc.name, set())
        if func_block is not None:
            return _Target(*func_block)
    if func is None:
        raise WeakenError(f"test function {'.'.join((*loc.classes, loc.name))} not found in {loc.file}")
    return _Target(func, block)


def _find_def(block: list[ast.stmt], name: str):
    found = None
    for n in block:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
            found = n  # the last definition wins, as in Python
    return found


def _find_in_bases(module: list[ast.stmt], cls: ast.ClassDef, name: str, seen: set[str]):
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in seen:
            seen.add(base.id)
            bcls = next((n for n in module if isinstance(n, ast.ClassDef) and n.name == base.id), None)
            if bcls is None:
                continue
            func = _find_def(bcls.body, name)
            if func is not None:
                return func, bcls.body
            found = _find_in_bases(module, bcls, name, seen)
            if found is not None:
                return found
    return None


def relocate(loc: TestLocation, read: Callable[[str], str], files: Iterable[str], _depth: int = 0) -> TestLocation:
    """Where the test's function is defined when its id names a class imported into the module (`from
    .test_a import TestA`, collected again there) or a class inheriting it from an imported base: that
    module's location, among `files`; else `loc` unchanged."""
    if not loc.classes or _depth > 4 or not loc.file.endswith(".py"):
        return loc
    try:
        tree = pyast.parse(read(loc.file))
    except (OSError, SyntaxError, ValueError):
        return loc
    first = loc.classes[0]
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == first), None)
    if cls is None:
        found = _imported(tree, loc.file, first, files)
        if found is None:
            return loc
        return relocate(TestLocation(found[0], (found[1], *loc.classes[1:]), loc.name), read, files, _depth + 1)
    if len(loc.classes) > 1 or _find_def(cls.body, loc.name) is not None \
            or _find_in_bases(tree.body, cls, loc.name, set()) is not None:
        return loc
    local = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id not in local:
            found = _imported(tree, loc.file, base.id, files)
            if found is not None:
                moved = relocate(TestLocation(found[0], (found[1],), loc.name), read, files, _depth + 1)
                if moved.file != loc.file:
                    return moved
    return loc


def _imported(tree: ast.Module, path: str, name: str, files: Iterable[str]) -> tuple[str, str] | None:
    """(file, original name) of a module-level `from M import name [as alias]` whose M is one of `files`."""
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if (alias.asname or alias.name) != name:
                continue
            mod = (node.module or "").replace(".", "/")
            if node.level:
                base = posixpath.dirname(path)
                for _ in range(node.level - 1):
                    base = posixpath.dirname(base)
                want = posixpath.normpath(posixpath.join(base, mod)) + ".py"
                hits = [f for f in files if f == want]
            else:
                hits = sorted((f for f in files if f == mod + ".py" or f.endswith("/" + mod + ".py")), key=len)
            if hits:
                return hits[0], alias.name
    return None


def remove_tests(text: str, locations: list[TestLocation], path: str = "<test>") -> str:
    """`text` without the test functions at `locations` (all in this one file).

    Only Python test modules are edited: a doctest text file or any other file that does not parse as Python
    raises WeakenError with the reason, never a SyntaxError."""
    if path != "<test>" and not path.endswith(".py"):
        raise WeakenError(f"{path} is not a Python test module (a doctest text or data file): not weakened")
    try:
        st = SourceText(text, path)
    except (SyntaxError, ValueError) as e:
        raise WeakenError(f"{path} does not parse as Python ({getattr(e, 'msg', e)}): not weakened") from None
    targets: dict[int, _Target] = {}
    for loc in locations:
        t = _find(st.tree, loc)
        targets[id(t.node)] = t
    # a class whose every member goes is removed as a whole (repeat: nested classes)
    parents = _parents(st.tree)
    changed = True
    while changed:
        changed = False
        for cls, block in parents:
            if id(cls) in targets or not isinstance(cls, ast.ClassDef):
                continue
            members = [m for m in cls.body if not _is_docstring(m, cls.body)]
            left = [m for m in members if id(m) not in targets]
            testless = not any(_holds_tests(m) for m in left) and not _referenced(st.tree, cls)
            if members and (not left or (testless and len(left) < len(members))):
                for m in cls.body:
                    targets.pop(id(m), None)
                targets[id(cls)] = _Target(cls, block)
                changed = True
    edits = [_delete_edit(st, t.node) for t in targets.values()]
    new = apply_edits(text, _merge_edits(edits))
    try:
        pyast.parse(new)
    except SyntaxError as e:
        raise WeakenError(f"removing the tests from {path} would break its syntax ({e.msg})") from None
    return new


def _holds_tests(node: ast.AST) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name.startswith("test")
    if isinstance(node, ast.ClassDef):
        return any(_holds_tests(m) for m in node.body)
    return False


def _referenced(tree: ast.Module, cls: ast.ClassDef) -> bool:
    """Is the class's name used anywhere else in the module (a base class, a helper)?"""
    inside = {id(n) for n in ast.walk(cls)}
    return any(isinstance(n, ast.Name) and n.id == cls.name and id(n) not in inside for n in ast.walk(tree))


def _merge_edits(edits: list[Edit]) -> list[Edit]:
    """Adjacent deletions may share blank lines: merge overlapping ranges."""
    out: list[Edit] = []
    for e in sorted(edits, key=lambda e: (e.start, e.end)):
        if out and e.start <= out[-1].end:
            last = out.pop()
            out.append(Edit(last.start, max(last.end, e.end), ""))
        else:
            out.append(e)
    return out


def _is_docstring(stmt: ast.stmt, block: list[ast.stmt]) -> bool:
    return stmt is block[0] and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
        and isinstance(stmt.value.value, str)


def _parents(tree: ast.Module) -> list[tuple[ast.ClassDef, list[ast.stmt]]]:
    out = []

    def visit(block: list[ast.stmt]) -> None:
        for n in block:
            if isinstance(n, ast.ClassDef):
                visit(n.body)
                out.append((n, block))

    visit(tree.body)
    return out  # innermost classes first


def _delete_edit(st: SourceText, node: ast.AST) -> Edit:
    first = node_first_line(node)
    last = node.end_lineno or node.lineno  # type: ignore[attr-defined]
    # comment lines attached directly above belong to the test
    while first > 1 and st.lines[first - 2].strip().startswith("#"):
        first -= 1
    # take the blank lines that separate it from what comes before; if it is the first thing in its block,
    # take the blank lines after it instead
    above = first
    while above > 1 and not st.lines[above - 2].strip():
        above -= 1
    if above < first and above > 1 and not st.lines[above - 2].rstrip().endswith(":"):
        first = above
    else:
        while last < len(st.lines) and not st.lines[last].strip():
            last += 1
    return Edit(st.line_start(first), st.line_end(last), "")
