"""Exported tasks carry ssrkit's verdict package whole (#27 step 3.3): `verdict.zip` beside grade.py, imported
as `ssrkit_verdict` under `python3 -I -S`, instead of definitions copied out of grade.py by their source text.
(That the exported SWE-bench and Harbor graders still grade exactly as `ssrkit solve`: tests/solve/test_export_peers.py.)"""

from __future__ import annotations

import ast
import io
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ssrkit import verdict
from ssrkit.runs import export
from ssrkit.verdict.statuses import ParseError, parse_statuses

VERDICT = Path(verdict.__file__).parent
TEMPLATE = Path(verdict.__file__).parents[1] / "templates" / "export_grader.py"


def _top_level_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


@pytest.fixture(scope="module")
def task_tests(tmp_path_factory) -> Path:
    """A Harbor task's tests/ as export writes them: grade.py and verdict.zip."""
    d = tmp_path_factory.mktemp("tests")
    (d / "grade.py").write_text(export.grader_script({"workdir": str(d)}))
    (d / export.VERDICT_ZIP).write_bytes(export.verdict_zip())
    return d


def test_the_zip_holds_the_verdict_package_whole_and_the_same_bytes_each_time():
    data = export.verdict_zip()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        shipped = {i.filename: zf.read(i) for i in zf.infolist()}
        assert {i.date_time for i in zf.infolist()} == {(1980, 1, 1, 0, 0, 0)}
    assert shipped == {f"{export.VERDICT_PACKAGE}/{p.name}": p.read_bytes() for p in VERDICT.glob("*.py")}
    assert export.verdict_zip.__wrapped__() == data


def test_the_verdict_imports_from_the_zip_with_nothing_but_the_standard_library(task_tests):
    modules = sorted(p.stem for p in VERDICT.glob("*.py") if p.stem != "__init__")
    code = (f"import sys; sys.path.insert(0, {str(task_tests / export.VERDICT_ZIP)!r})\n"
            f"import importlib\n"
            f"for m in {modules!r}: importlib.import_module('{export.VERDICT_PACKAGE}.' + m)\n"
            f"try:\n    import ssrkit\nexcept ImportError:\n    print('ok')\n")
    proc = subprocess.run(["python3", "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout == "ok\n", proc.stderr  # and ssrkit itself was not there to import


def test_every_verdict_import_is_at_module_level():
    """The grader imports the verdict when it starts, before any test runs: a verdict module that imported
    inside a function would read the zip again later, after the fix's code (root in the container) could have
    replaced it. At module level, the graded run meets only code loaded before it started."""
    late = [f"{p.name}:{node.lineno}" for p in sorted(VERDICT.glob("*.py"))
            for top in ast.parse(p.read_text()).body if not isinstance(top, (ast.Import, ast.ImportFrom))
            for node in ast.walk(top) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert late == []


def test_the_exported_grader_defines_nothing_the_verdict_defines():
    """No rule is written twice: the template does the container's I/O and imports every rule."""
    verdict = set().union(*(_top_level_names(ast.parse(p.read_text())) for p in VERDICT.glob("*.py")))
    grader = _top_level_names(ast.parse(TEMPLATE.read_text()))
    assert grader & verdict == set()
    assert not hasattr(export, "_GRADER_PARTS")
    assert not any("getsource" in p.read_text() for p in Path(export.__file__).parent.glob("*.py"))


def test_a_parser_that_prints_a_test_twice_fails_in_the_exported_grader_as_in_ssrkit_solve(task_tests):
    """The copied parse_statuses called `clip`, which nobody copied: the exported grader failed with a
    NameError where ssrkit solve names the duplicate test id."""
    printed = '{"tests/test_a.py::test_x": "passed", "tests/test_a.py::test_x": "failed"}'
    with pytest.raises(ParseError) as ours:
        parse_statuses(printed)
    code = (f"import sys; sys.path.insert(0, {str(task_tests)!r}); import grade\n"
            f"try:\n    grade.parse_statuses({printed!r})\n"
            f"except grade.ParseError as e:\n    print(e)\n")
    proc = subprocess.run(["python3", "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == str(ours.value), proc.stderr
