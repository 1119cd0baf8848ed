"""The house rules of the source tree, checked: one owner per file name, no import cycle, the core never
imports the CLI, no function too long to read top to bottom (issue 12; SPEC §12)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ssrkit import artifact

SRC = Path(__file__).resolve().parents[1] / "src" / "ssrkit"
#: copied verbatim into exported tasks or sandboxes, where ssrkit cannot be imported
STANDALONE = ("templates", "_cov")
#: entry points (`python -m ...`) belong to the command line, like cli/
ENTRY_POINTS = ("ssrkit.__main__", "ssrkit.train.__main__")


def _modules() -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        if any(part in STANDALONE for part in p.relative_to(SRC).parts):
            continue
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _targets(module: str, node: ast.AST, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base) + ("." + node.module if node.module else "")
    else:
        target = node.module or ""
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
    # `from pkg import submodule` depends on the submodule (its package is imported first in any case)
    return subs if len(subs) == len(node.names) else [target, *subs]


def import_graph(*, lazy: bool) -> dict[str, set[str]]:
    """module -> the ssrkit modules it imports: at import time only (`lazy=False`: module-level statements,
    TYPE_CHECKING blocks left out), or including imports inside functions."""
    graph = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = ast.walk(tree) if lazy else [n for n in tree.body if not isinstance(n, ast.If)]
        deps = set()
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps.update(t for t in _targets(name, node, path.name == "__init__.py") if t in MODULES and t != name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_at_import_time():
    assert cycles(import_graph(lazy=False)) == []


def test_no_import_cycle_even_through_lazy_imports():
    """An import inside a function is still an arrow: each unit of work lives beside the engine that submits
    it, and the Ray engine is a module of the executor package, so nothing imports in a ring."""
    assert cycles(import_graph(lazy=True)) == []


def test_the_core_never_imports_the_cli():
    graph = import_graph(lazy=True)
    upward = sorted((m, d) for m, deps in graph.items() for d in deps
                    if d.startswith("ssrkit.cli") and not m.startswith("ssrkit.cli") and m not in ENTRY_POINTS)
    assert upward == []


def test_train_depends_only_on_the_artifact_layer():
    """`ssrkit.train` reads artifact directories through artifact.py/attempts.py (rollout files through
    rollout_file.py) and nothing else of ssrkit's core, so a training cluster needs no sandbox, Docker or model
    client code."""
    allowed = {"ssrkit.artifact", "ssrkit.attempts", "ssrkit.rollout_file", "ssrkit.errors", "ssrkit.config", "ssrkit.reward", "ssrkit.hf_checkpoint",
               "ssrkit.fsutil", "ssrkit.source", "ssrkit"}
    graph = import_graph(lazy=True)
    used = {d for m, deps in graph.items() if m.startswith("ssrkit.train") and m not in ENTRY_POINTS
            for d in deps if not d.startswith("ssrkit.train")}
    assert used <= allowed, sorted(used - allowed)


def _file_names() -> dict[str, str]:
    return {k: v for k, v in vars(artifact).items()
            if k.isupper() and isinstance(v, str) and re.fullmatch(r"[a-z_]+(\.[a-z]+)?", v)}


def _spellings(path: Path, name: str):
    """Lines of `path` that spell the file name `name` as a path: the literal itself (or `name/...`); for a
    directory name without a dot (also a word of JSON keys), only where it is joined (`x / "logs"`) or skipped
    (`skip=("logs",)`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_name = lambda n: isinstance(n, ast.Constant) and n.value == name  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(name + "/"):
            yield node.lineno
        elif "." in name and is_name(node):
            yield node.lineno
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and is_name(node.right):
            yield node.lineno
        elif isinstance(node, ast.keyword) and node.arg == "skip" and any(is_name(n) for n in ast.walk(node.value)):
            yield node.value.lineno


@pytest.mark.parametrize("const", sorted(_file_names()))
def test_each_artifact_file_name_is_written_once(const):
    """Every file of an artifact directory is named by its constant in artifact.py; nobody spells it again."""
    name = _file_names()[const]
    spelled = [f"{path.relative_to(SRC)}:{line}" for mod, path in MODULES.items() if mod != "ssrkit.artifact"
               for line in _spellings(path, name)]
    assert spelled == [], f"{name} is artifact.{const}; use the constant"


def test_no_function_is_too_long_to_read():
    """At most 120 lines a function; the GRPO loop may be one top-to-bottom function of at most 200."""
    long = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                limit = 200 if (mod, node.name) == ("ssrkit.train.loop", "train") else 120
                if node.end_lineno - node.lineno + 1 > limit:
                    long.append(f"{mod}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long == []


def test_the_spec_boundaries_hold():
    """SPEC §12: the sandbox knows nothing of artifacts; reward.py does no I/O; only agents/ talks to a model
    (others hold a client it built, but never import the HTTP client)."""
    graph = import_graph(lazy=True)
    sandbox_deps = {d for m, deps in graph.items() if m.startswith("ssrkit.sandbox") for d in deps}
    assert not sandbox_deps & {"ssrkit.artifact", "ssrkit.attempts", "ssrkit.validate", "ssrkit.grade"}
    assert graph["ssrkit.reward"] <= {"ssrkit.errors"}
    reward_src = (SRC / "reward.py").read_text(encoding="utf-8")
    assert not re.search(r"^\s*(import|from)\s+(os|pathlib|json|subprocess|io|shutil)\b", reward_src, re.M)
    http = [m for m, p in MODULES.items() if not m.startswith("ssrkit.agents")
            and re.search(r"^\s*(import|from)\s+(httpx|openai|requests|urllib\.request)\b", p.read_text(), re.M)]
    assert http == [] or set(http) <= {"ssrkit.serve"}, http  # serve polls the server it started for readiness


def test_one_option_style():
    """Every command declares its options one way: `name: Annotated[T, typer.Option(...)] = default`."""
    old = []
    for mod, path in MODULES.items():
        if not mod.startswith("ssrkit.cli."):
            continue
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(fn, ast.FunctionDef):
                for d in [*fn.args.defaults, *fn.args.kw_defaults]:
                    src = ast.unparse(d) if d is not None else ""
                    if src.startswith(("typer.Option(", "typer.Argument(")) or (isinstance(d, ast.Name)
                                                                                and d.id.endswith("Opt")):
                        old.append(f"{mod}.{fn.name}: {src[:40]}")
    assert old == []


def test_every_import_of_ssrkit_resolves():
    """Imports inside functions run only when called: a module moved into a package must not leave one
    pointing at a module that no longer exists (`from .fsutil import ...` one level too shallow)."""
    broken = []
    for name, path in MODULES.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("ssrkit")):
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                if node.level:
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base) + ("." + node.module if node.module else "")
                else:
                    target = node.module
                if target not in MODULES:
                    broken.append(f"{name}:{node.lineno}: {target}")
    assert broken == []
