"""The house rules of the source tree, checked: one owner per file name, no import cycle, the core never
imports the CLI, no function too long to read top to bottom (issue 12; SPEC §12)."""

from __future__ import annotations

import ast
import functools
import re
import sys
from pathlib import Path

import pytest

from ssrkit.store import artifact

pytestmark = pytest.mark.fast

SRC = Path(__file__).resolve().parents[1] / "src" / "ssrkit"
#: copied verbatim into exported tasks or sandboxes, where ssrkit cannot be imported
STANDALONE = ("templates", "_cov")
#: old import paths of moved modules, one-line aliases of the new ones kept while branches still in flight import
#: them; no rule applies to them and no module of src/ imports one. Empty since #27's step 7.2 removed them all
SHIMS: set[str] = set()
#: entry points (`python -m ...`) belong to the command line, like cli/
ENTRY_POINTS = ("ssrkit.__main__", "ssrkit.train.__main__")


def _modules(*, shims: bool = False) -> dict[str, Path]:
    out = {}
    for p in SRC.rglob("*.py"):
        if any(part in STANDALONE for part in p.relative_to(SRC).parts):
            continue
        parts = list(p.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if shims or ".".join(parts) not in SHIMS:
            out[".".join(parts)] = p
    return out


MODULES = _modules()


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The parsed module (parsed once: every rule walks every module)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _targets(module: str, node: ast.AST, is_pkg: bool, modules: dict[str, Path] | None = None) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base) + ("." + node.module if node.module else "")
    else:
        target = node.module or ""
    modules = MODULES if modules is None else modules
    subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules]
    # `from pkg import submodule` depends on the submodule (its package is imported first in any case)
    return subs if len(subs) == len(node.names) else [target, *subs]


def import_graph(*, lazy: bool) -> dict[str, set[str]]:
    """module -> the ssrkit modules it imports: at import time only (`lazy=False`: module-level statements,
    TYPE_CHECKING blocks left out), or including imports inside functions."""
    graph = {}
    for name, path in MODULES.items():
        tree = _tree(path)
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
    """`ssrkit.train` reads artifact directories through `store/` (rollout files through rollout_file.py) and
    nothing else of ssrkit's core, so a training cluster needs no sandbox, Docker or model client code."""
    allowed = {"ssrkit.errors", "ssrkit.rollout_file", "ssrkit"}
    graph = import_graph(lazy=True)
    used = {d for m, deps in graph.items() if m.startswith("ssrkit.train") and m not in ENTRY_POINTS
            for d in deps if not d.startswith(("ssrkit.train", "ssrkit.store", "ssrkit.verdict"))}
    assert used <= allowed, sorted(used - allowed)


def test_no_module_imports_an_old_path():
    """A moved module is imported from where it lives now; its old path is only an alias for other branches."""
    old, every = [], _modules(shims=True)
    for name, path in MODULES.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                shims = SHIMS & set(_targets(name, node, is_pkg, every))
                old += [f"{name}:{node.lineno}: {s}" for s in sorted(shims)]
    assert old == []


def test_each_shim_is_an_alias_of_its_new_module():
    """A shim is one line that makes the old path the new module itself (monkeypatching either patches both)."""
    import importlib

    for old in sorted(SHIMS):
        module = importlib.import_module(old)
        assert module.__name__ != old and module.__name__.startswith("ssrkit."), old
        code = [ln for ln in (SRC.parent / (old.replace(".", "/") + ".py")).read_text().splitlines()[1:] if ln.strip()]
        assert len(code) == 1 and "sys.modules[__name__]" in code[0], old


STORE = "ssrkit.store"


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def _file_names() -> dict[str, str]:
    """`module.CONST` -> the file or directory name it defines, for every such constant of `store/`: a str with
    a dot (`eval.json`), or a directory its module's docstring draws in the layout (`logs/`, `original-runs/`)."""
    out = {}
    for mod, path in MODULES.items():
        if not mod.startswith(STORE):
            continue
        drawn = ast.get_docstring(_tree(path)) or ""
        for node in _tree(path).body:
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            pairs = (zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                     else [(target, value)])
            for name, const in pairs:
                if not (isinstance(name, ast.Name) and name.id.isupper() and isinstance(const, ast.Constant)
                        and isinstance(const.value, str)):
                    continue
                v = const.value
                if re.fullmatch(r"[a-z_.-]+\.[a-z]+", v) or re.search(rf"(?<![\w-]){re.escape(v)}/", drawn):
                    out[f"{mod.removeprefix(STORE + '.')}.{name.id}"] = v
    return out


def _spellings(path: Path, name: str):
    """Lines of `path` that spell the file name `name` as a path: the literal itself, `name/...`, `.../name`
    or `.../name/...`; for a directory name without a dot (also a word of JSON keys), only where it is joined
    (`x / "logs"`) or skipped (`skip=("logs",)`). Docstrings and prose (a longer sentence) are not paths."""
    tree = _tree(path)
    docs = _docstrings(tree)
    is_name = lambda n: isinstance(n, ast.Constant) and n.value == name  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            v = node.value
            if (" " not in v and (v.startswith(name + "/") or v.endswith("/" + name) or f"/{name}/" in v)) \
                    or ("." in name and v == name):
                yield node.lineno
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and is_name(node.right):
            yield node.lineno
        elif isinstance(node, ast.keyword) and node.arg == "skip" and any(is_name(n) for n in ast.walk(node.value)):
            yield node.value.lineno


#: (store constant, file) where the same spelling names another file, not the store's, and why
SAME_SPELLING = {
    ("cache.NODE_REPOS", "cli/examples.py"): "the example repositories' folders (examples/repos, build/repos)",
    ("runs.TASKS", "runs/export/swebench.py"): "the tasks/ folder of a SWE-bench task repository (SWE-bench's layout)",
}


@pytest.mark.parametrize("const", sorted(_file_names()))
def test_each_file_name_is_written_once(const):
    """Every file and directory of the on-disk layout is named by its constant in `store/`; nobody else spells
    it again (#27 R1)."""
    name = _file_names()[const]
    owner = f"{STORE}.{const.rpartition('.')[0]}"
    spelled = sorted({f"{path.relative_to(SRC)}:{line}" for mod, path in MODULES.items() if mod != owner
                      and (const, str(path.relative_to(SRC))) not in SAME_SPELLING for line in _spellings(path, name)})
    assert spelled == [], f"{name} is store.{const}; use the constant"


#: the names of an attempt's files: joined to a path only in store/attempts.py (#27 R2)
ATTEMPT_NAMES = {"ATTEMPTS", "EVAL", "FIX", "TEST_OUTPUT", "CANARY_OUTPUT", "TRAJECTORY"}
#: paths into an attempt still made outside store/, each with how often: the list only shrinks
ATTEMPT_PATHS_LEFT: dict[tuple[str, str], int] = {}


def _attempt_paths() -> dict[tuple[str, str], int]:
    """(file, expression) -> count of every path into an attempt made outside store/: an f-string naming
    ATTEMPTS or `attempts/`, `x / NAME` or `x.joinpath(NAME)` for an attempt file's constant."""
    found: dict[tuple[str, str], int] = {}

    def named(n: ast.AST) -> bool:
        return (isinstance(n, ast.Name) and n.id in ATTEMPT_NAMES) or (isinstance(n, ast.Attribute)
                                                                      and n.attr in ATTEMPT_NAMES)

    for mod, path in MODULES.items():
        if mod.startswith(STORE):
            continue
        for n in ast.walk(_tree(path)):
            hit = False
            if isinstance(n, ast.JoinedStr):
                hit = any(isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name)
                          and v.value.id == "ATTEMPTS" for v in n.values) \
                    or any(isinstance(v, ast.Constant) and "attempts/" in str(v.value) for v in n.values)
            elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div):
                hit = named(n.right)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "joinpath":
                hit = any(named(a) for a in n.args)
            if hit:
                key = (str(path.relative_to(SRC)), ast.unparse(n))
                found[key] = found.get(key, 0) + 1
    return found


def test_paths_into_an_attempt_are_made_in_the_store():
    """`attempts/NNN/` is store/attempts.py's: others call it (begin_attempt, write_fix, write_graded,
    read_fix, ...) instead of joining the names themselves (#27 R2)."""
    found = _attempt_paths()
    new = {k: v for k, v in found.items() if v > ATTEMPT_PATHS_LEFT.get(k, 0)}
    assert new == {}, "make the path in ssrkit.store.attempts"
    gone = {k: v for k, v in ATTEMPT_PATHS_LEFT.items() if found.get(k, 0) < v}
    assert gone == {}, "fixed: take it off ATTEMPT_PATHS_LEFT"


def test_no_function_is_too_long_to_read():
    """At most 120 lines a function; the GRPO loop may be one top-to-bottom function of at most 200."""
    long = []
    for mod, path in MODULES.items():
        for node in ast.walk(_tree(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                limit = 200 if (mod, node.name) == ("ssrkit.train.loop", "train") else 120
                if node.end_lineno - node.lineno + 1 > limit:
                    long.append(f"{mod}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert long == []


def test_the_spec_boundaries_hold():
    """SPEC §12: the sandbox knows nothing of artifacts; the rewards do no I/O; only agents/ talks to a model
    (others hold a client it built, but never import the HTTP client)."""
    graph = import_graph(lazy=True)
    sandbox_deps = {d for m, deps in graph.items() if m.startswith("ssrkit.sandbox") for d in deps}
    assert not sandbox_deps & {"ssrkit.store.artifact", "ssrkit.store.attempts", "ssrkit.validate", "ssrkit.solve.grade"}
    assert graph["ssrkit.verdict.rewards"] == set()
    reward_src = (SRC / "verdict" / "rewards.py").read_text(encoding="utf-8")
    assert not re.search(r"^\s*(import|from)\s+(os|pathlib|json|subprocess|io|shutil)\b", reward_src, re.M)
    http = [m for m, p in MODULES.items() if not m.startswith("ssrkit.agents")
            and re.search(r"^\s*(import|from)\s+(httpx|openai|requests|urllib\.request)\b", p.read_text(), re.M)]
    assert http == [] or set(http) <= {"ssrkit.serving.process"}, http  # serving polls the server it started for readiness


def test_one_option_style():
    """Every command declares its options one way: `name: Annotated[T, typer.Option(...)] = default`."""
    old = []
    for mod, path in MODULES.items():
        if not mod.startswith("ssrkit.cli."):
            continue
        for fn in ast.walk(_tree(path)):
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
        for node in ast.walk(_tree(path)):
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


# -- the tests' own tree --------------------------------------------------------------------------------

TESTS = Path(__file__).resolve().parent
#: run as `python FILE` (never imported by pytest): a script may find its own imports
TEST_SCRIPTS = {"fixtures/manual_check.py"}


def _test_sources() -> dict[str, ast.Module]:
    return {str(p.relative_to(TESTS)): ast.parse(p.read_text(encoding="utf-8")) for p in sorted(TESTS.rglob("*.py"))
            if p.relative_to(TESTS).parts[0] != "data" and str(p.relative_to(TESTS)) not in TEST_SCRIPTS}


def _imports_a_test_module(node: ast.AST) -> bool:
    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
             else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
    return any(part == "conftest" or part.startswith("test_") for n in names for part in n.split(".")) or (
        isinstance(node, ast.ImportFrom) and node.level > 0)


def _edits_sys_path(node: ast.AST) -> bool:
    def is_sys_path(n: ast.AST) -> bool:
        return isinstance(n, ast.Attribute) and n.attr == "path" and isinstance(n.value, ast.Name) and n.value.id == "sys"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return is_sys_path(node.func.value) and node.func.attr in ("insert", "append", "extend")
    if isinstance(node, (ast.Assign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(is_sys_path(t) or (isinstance(t, ast.Subscript) and is_sys_path(t.value)) for t in targets)
    return False


def test_helpers_come_from_fixtures_and_nobody_edits_sys_path():
    """Helpers are modules of tests/fixtures/ (`from fixtures.git import git`), never a conftest or another
    test module: `from conftest import` finds whichever conftest another folder imported first, and a test module
    imported by another runs its module code twice. pyproject's `pythonpath` puts src/ and tests/ on sys.path,
    so no test edits it (a subprocess gets PYTHONPATH from fixtures.paths.pythonpath())."""
    bad = [f"{rel}:{node.lineno}" for rel, tree in _test_sources().items() for node in ast.walk(tree)
           if _imports_a_test_module(node) or _edits_sys_path(node)]
    assert bad == []


#: what a file of the fast tier never imports: a sandbox, a process, Docker, Ray
HEAVY = ("subprocess", "docker", "ray", "ssrkit.sandbox")


def _is_fast_file(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets)
               and "mark.fast" in ast.unparse(n.value) for n in tree.body)


def _heavy_imports(tree: ast.Module) -> list[str]:
    names = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            names += [(a.name, n.lineno) for a in n.names]
        elif isinstance(n, ast.ImportFrom) and n.level == 0:
            names += [(f"{n.module}.{a.name}", n.lineno) for a in n.names]
    return [f"{line}: {name}" for name, line in names if any(name == h or name.startswith(h + ".") for h in HEAVY)]


def test_fast_files_import_nothing_heavy_and_every_verdict_test_is_fast():
    """`make test-fast` runs the tests marked `fast` in seconds, on the light virtualenv: a file marked so as a whole
    (`pytestmark`) imports no sandbox, subprocess, Docker or Ray; and verdict/, standard library only, is all fast."""
    sources = _test_sources()
    fast = {rel for rel, tree in sources.items() if _is_fast_file(tree)}
    heavy = [f"{rel}:{where}" for rel in sorted(fast) for where in _heavy_imports(sources[rel])]
    unmarked = [rel for rel in sources if rel.startswith("verdict/test_") and rel not in fast]
    assert heavy == [] and unmarked == []


VERDICT = "ssrkit.verdict"


def test_the_verdict_imports_only_the_standard_library():
    """verdict/ is shipped whole inside exported tasks, where only the standard library and the package itself
    (as `ssrkit_verdict`) can be imported: a module of it imports stdlib modules and, relatively, its siblings,
    and never imports by a computed name (#27 R3)."""
    bad = []
    for mod, path in MODULES.items():
        if not (mod == VERDICT or mod.startswith(VERDICT + ".")):
            continue
        for n in ast.walk(_tree(path)):
            where = f"{path.relative_to(SRC)}:{getattr(n, 'lineno', 0)}"
            if isinstance(n, ast.Import):
                bad += [f"{where}: import {a.name}" for a in n.names
                        if a.name.split(".")[0] not in sys.stdlib_module_names]
            elif isinstance(n, ast.ImportFrom) and n.level == 0:
                top = (n.module or "").split(".")[0]
                if top != "__future__" and top not in sys.stdlib_module_names:
                    bad.append(f"{where}: from {n.module}")
            elif isinstance(n, ast.ImportFrom) and (n.level != 1 or path.name == "__init__.py" and n.level > 1):
                bad.append(f"{where}: from {'.' * n.level}{n.module or ''} (only its siblings, as `from .x import`)")
            elif isinstance(n, ast.Call) and ast.unparse(n.func) in ("__import__", "importlib.import_module", "exec",
                                                                      "eval", "import_module"):
                bad.append(f"{where}: {ast.unparse(n.func)}(...)")
    assert bad == []


#: the pipeline's stages and what drives them: shared machinery below them must not reach up into one
STAGES = ("ssrkit.inject", "ssrkit.validate", "ssrkit.solve", "ssrkit.solve.solvers", "ssrkit.solve.repair", "ssrkit.solve.grade",
          "ssrkit.solve.higher_order", "ssrkit.runs", "ssrkit.runs.pool", "ssrkit.runs.report", "ssrkit.runs.export",
          "ssrkit.serving", "ssrkit.agents", "ssrkit.train", "ssrkit.cli")


def test_mutation_imports_no_stage():
    """mutation/ (operators, source text, the coverage map) is shared by the injector and the repair baseline:
    it stands below both, so neither drags the other in (#27 step 4.1)."""
    graph = import_graph(lazy=True)
    up = sorted(f"{m} -> {d}" for m, deps in graph.items() if m.startswith("ssrkit.mutation")
                for d in deps if d.startswith(STAGES))
    assert up == []


#: `timeout` defaults that bound a wait on a client, a process or a server, not a command in a sandbox
WAITS = {("ssrkit.sandbox.docker", "client"), ("ssrkit.sandbox._guardian", "remove_cgroup"),
         ("ssrkit.sandbox._cgroup", "kill_all"), ("ssrkit.sandbox.local", "_scan_kill"),
         ("ssrkit.serving.process", "_http"), ("ssrkit.serving.nccl", "__init__"),
         ("ssrkit.cli.serve", "serve")}  # --timeout: how long a server may take to be ready


def _is_number(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def test_housekeeping_timeouts_are_named_once():
    """ssrkit's own commands in a sandbox (mkdir, git plumbing, snapshot copies) are bounded by the names of
    sandbox/timeouts.py, never a number at the call or in a parameter's default (#27 step 5.5)."""
    bad = []
    for mod, path in MODULES.items():
        if mod == "ssrkit.sandbox.timeouts":
            continue
        for node in ast.walk(_tree(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not (
                    isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"):
                bad += [f"{mod}:{node.lineno}: {ast.unparse(node.func)}(timeout={ast.unparse(k.value)})"
                        for k in node.keywords if k.arg == "timeout" and _is_number(k.value)
                        and node.func.attr in ("run", "_exec_simple")]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (mod, node.name) not in WAITS:
                args = [*node.args.posonlyargs, *node.args.args]
                pairs = [*zip(args[len(args) - len(node.args.defaults):], node.args.defaults),
                         *zip(node.args.kwonlyargs, node.args.kw_defaults)]
                bad += [f"{mod}:{node.lineno}: def {node.name}(timeout={ast.unparse(d)})"
                        for a, d in pairs if a.arg == "timeout" and _is_number(d)]
    assert bad == [], "name it in ssrkit.sandbox.timeouts (or, for a client/process wait, add it to WAITS)"


def _command_body_lines(fn: ast.FunctionDef) -> int:
    body = fn.body[1:] if isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant) else fn.body
    return body[-1].end_lineno - body[0].lineno + 1 if body else 0


def test_a_command_parses_calls_and_renders():
    """A command (a public function of cli/ taking `Annotated` options) is a short body: parse the flags, call
    the core, render; the work itself lives in the core, where other callers reach it (#27 step 6.6)."""
    long = []
    for mod, path in MODULES.items():
        if not mod.startswith("ssrkit.cli."):
            continue
        for fn in _tree(path).body:
            if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_") and any(
                    a.annotation is not None and "Annotated" in ast.unparse(a.annotation) for a in fn.args.args):
                if _command_body_lines(fn) > 40:
                    long.append(f"{mod}.{fn.name}: {_command_body_lines(fn)} lines")
    assert long == []
