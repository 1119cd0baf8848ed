"""Zero-configuration reach: repositories as people have them, each made here in the situation it reproduces
(README doctests in addopts, the package also installed non-editable, a test module that errors at
collection, a virtualenv without coverage), plus doctest modules, subtests and parametrized ids."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path

import pytest

from fixtures.git import commit_all, git, write_tree
from fixtures.sandboxes import local_sandbox
from fixtures.toyrepos import CALC_OPS, CALC_TEST_OPS, CALC_TEST_TEXT, CALC_TEXT, UNITS_OPS, UNITS_TEST
from ssrkit.store.artifact import Artifact
from ssrkit.inject.procedural import Session, StrategyStats, inject
from ssrkit.inject.runner import TestLocation
from ssrkit.inject.weaken import WeakenError, remove_tests
from ssrkit.sandbox._imports import import_roots, top_level_names

README = '''# calc

    >>> from calc.ops import clamp
    >>> clamp(11, 0, 10)
    10
    >>> clamp(-3, 0, 10)
    0
'''

DOCTEST_MODULE = '''def double(x):
    """Twice x.

    >>> double(4)
    8
    """
    return x * 2
'''


def _repo(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    repo = tmp_path / name
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    write_tree(repo, {".gitignore": "__pycache__/\n*.egg-info/\n", **files})
    commit_all(repo, f"Add {name}")
    return repo


def _calc_files(**extra: str) -> dict[str, str]:
    return {"calc/__init__.py": "", "calc/ops.py": CALC_OPS, "calc/text.py": CALC_TEXT,
            "tests/test_ops.py": CALC_TEST_OPS, "tests/test_text.py": CALC_TEST_TEXT, **extra}


def _venv(tmp_path: Path, with_pytest: bool) -> Path:
    """A virtualenv of this interpreter without pip; `with_pytest`: it sees pytest (and coverage) through a .pth
    pointing at this environment's site-packages, like packages installed into it."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    if with_pytest:
        (site / "host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def _activate(monkeypatch, venv: Path) -> None:
    monkeypatch.setenv("VIRTUAL_ENV", str(venv))
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")


# -- 1. README doctests through --doctest-glob in addopts, doctest modules ---------------------------------

def test_readme_doctests_and_doctest_modules_are_never_parsed_as_python(tmp_path, sandbox_factory):
    repo = _repo(tmp_path, "readme", _calc_files(**{
        "README.md": README, "calc/double.py": DOCTEST_MODULE,
        "pyproject.toml": '[tool.pytest.ini_options]\naddopts = "--doctest-glob=README.md --doctest-modules"\n'}))
    with Session(repo, tmp_path / "s", sandbox_factory=sandbox_factory) as s:
        s.setup(history=False)
        tm = s.testmap
        assert "README.md::README.md" in tm.doctests and "calc/double.py::calc.double.double" in tm.doctests
        # doctest items are no test files: README.md is never selected, a code module is never a test file
        assert "README.md" not in s.repo.usable_files and "calc/double.py" not in s.repo.usable_files
        assert "calc/double.py" in s.repo.modules
        # parametrized ids are tests like any other
        assert {"tests/test_ops.py::test_mean[items0-2.0]", "tests/test_ops.py::test_mean[items1-2.0]"} <= s.repo.passing
        # a run whose every candidate was discarded names the stage, the top reason and the setting
        s.last_messages["harmless"] = "no selected test fails"
        lines = s.diagnose({"expression": StrategyStats(tried=4, statuses={"harmless": 3, "timeout": 1})})
        assert lines[0] == "every one of the 4 candidate(s) was discarded: harmless 3, timeout 1"
        assert lines[1] == "e.g. harmless: no selected test fails" and lines[-1].startswith("setting: --max-tries")
        # no candidate at all: the strategies this run left out are named
        lines = s.diagnose({"expression": StrategyStats(), "history": StrategyStats()})
        assert lines[-1].startswith("setting: --strategy expression,removal,history,combine (all strategies: "
                                    "this run left out removal, combine)")
    result = inject(repo, tmp_path / "out", n=2, strategies="expression,removal", sandbox_factory=sandbox_factory)
    assert len(result.artifacts) == 2
    for a in result.artifacts:
        art = Artifact(a.path)
        assert art.validation["valid"] and all(f.endswith(".py") for f in art.test_files)


def test_weakening_a_non_python_file_is_a_reason_not_a_syntax_error():
    loc = TestLocation("README.md", (), "README.md")
    with pytest.raises(WeakenError, match="not a Python test module"):
        remove_tests(README, [loc], "README.md")
    with pytest.raises(WeakenError, match="does not parse as Python"):
        remove_tests("def test_x(:\n", [TestLocation("tests/test_x.py", (), "test_x")], "tests/test_x.py")


# -- 2. the package under test also installed, non-editable, in the virtualenv ------------------------------

SHADE = '''def area(w, h):
    if w < 0 or h < 0:
        raise ValueError("negative")
    return w * h


def perimeter(w, h):
    return 2 * (w + h)


def square(side):
    return area(side, side)
'''

SHADE_TESTS = '''import pytest

from shade import area, perimeter, square


def test_area():
    assert area(2, 3) == 6


def test_area_zero():
    assert area(0, 3) == 0


def test_area_negative():
    with pytest.raises(ValueError):
        area(-1, 2)


def test_perimeter():
    assert perimeter(2, 3) == 10


def test_square():
    assert square(3) == 9


def test_square_one():
    assert square(1) == 1
'''


def test_a_copy_installed_in_site_packages_does_not_shadow_the_workspace(tmp_path, monkeypatch, sandbox_factory):
    repo = _repo(tmp_path, "shade", {"src/shade/__init__.py": SHADE, "tests/test_shade.py": SHADE_TESTS,
                                     "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"})
    venv = _venv(tmp_path, with_pytest=True)
    site = next((venv / "lib").glob("python*/site-packages"))
    shutil.copytree(repo / "src" / "shade", site / "shade")  # what a non-editable install leaves
    _activate(monkeypatch, venv)
    sb = local_sandbox(repo)
    try:
        res = sb.run("python -c 'import shade; print(shade.__file__)'", timeout=60)
        assert res.ok and res.output.strip().startswith(os.path.join(sb.root, "src", "shade")), res.output
        assert os.path.join(sb.root, "src") in sb.import_roots
    finally:
        sb.close()
    result = inject(repo, tmp_path / "out", n=1, strategies="expression", sandbox_factory=sandbox_factory)
    assert len(result.artifacts) == 1 and not result.diagnosis
    assert not any("not from the workspace" in n for n in result.notes)


def test_import_roots_follow_the_packaging_configuration(tmp_path):
    (tmp_path / "lib" / "pkg").mkdir(parents=True)
    (tmp_path / "lib" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools.package-dir]\n"" = "lib"\n')
    assert import_roots(str(tmp_path)) == [".", "lib"]
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "setup.cfg").write_text("[options]\npackage_dir =\n    =lib\n")
    assert import_roots(str(tmp_path)) == [".", "lib"]
    assert top_level_names(str(tmp_path), [".", "lib"]) == ["pkg"]


def test_a_package_imported_from_elsewhere_is_named_in_the_diagnosis(tmp_path, monkeypatch, sandbox_factory):
    """The repository's own start-up hook puts an installed copy first on purpose: the run says so and why."""
    repo = _repo(tmp_path, "elsewhere", {"src/shade/__init__.py": SHADE, "tests/test_shade.py": SHADE_TESTS})
    other = tmp_path / "installed"
    shutil.copytree(repo / "src" / "shade", other / "shade")
    monkeypatch.setenv("PYTHONPATH", str(other))  # (a toolchain directory: visible inside the sandbox)
    write_tree(repo, {"tests/conftest.py": f"import sys\nsys.path.insert(0, {str(other)!r})\n",
                      "sitecustomize.py": f"import sys\nsys.path.insert(0, {str(other)!r})\n"})
    commit_all(repo, "use the installed copy")
    result = inject(repo, tmp_path / "out", n=1, strategies="expression", sandbox_factory=sandbox_factory)
    assert result.artifacts == []
    assert any(f"the tests import shade from {other / 'shade'}" in n for n in result.notes), result.notes
    text = "\n".join(result.diagnosis)
    assert "no covered function" in text and "not the workspace's" in text and "setting:" in text


# -- 3. a test module that errors at collection ------------------------------------------------------------

def test_a_test_module_erroring_at_collection_is_excluded_with_a_note(tmp_path, sandbox_factory):
    repo = _repo(tmp_path, "broken", _calc_files(**{
        "tests/test_vendored.py": "from vendored_submodule import thing\n\n\ndef test_thing():\n    assert thing\n",
        "tests/test_flaky_env.py": "import os\n\n\ndef test_env():\n    assert os.environ.get('NOT_SET_ANYWHERE')\n",
        "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"}))
    result = inject(repo, tmp_path / "out", n=1, strategies="expression", sandbox_factory=sandbox_factory)
    assert len(result.artifacts) == 1
    files_note = next(n for n in result.notes if "test file" in n)
    assert "tests/test_vendored.py (error at collection" in files_note and "vendored_submodule" in files_note
    assert "tests/test_flaky_env.py (no test passes on the original code)" in files_note
    art = Artifact(result.artifacts[0].path)
    assert "tests/test_vendored.py" not in art.test_files and "tests/test_flaky_env.py" not in art.test_files


FLAKY = '''

def test_flaky_{name}():
    # passes in the coverage run (a tracer is set) and fails in every later run: flaky, as ssrkit sees it
    # (every run gets a fresh HOME and /tmp, so no state can carry over between runs)
    import sys

    assert sys.gettrace() is not None
'''


def test_a_test_that_flakes_on_the_original_code_is_excluded_with_a_note(tmp_path, sandbox_factory):
    repo = _repo(tmp_path, "flaky", _calc_files(**{
        "tests/test_ops.py": CALC_TEST_OPS + FLAKY.format(name="ops"),
        "tests/test_text.py": CALC_TEST_TEXT + FLAKY.format(name="text"),
        "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"}))
    result = inject(repo, tmp_path / "out", n=1, strategies="expression", sandbox_factory=sandbox_factory)
    assert len(result.artifacts) == 1
    flaky = [n for n in result.notes if "(flaky)" in n]
    assert flaky and "test_flaky_" in flaky[0], result.notes
    art = Artifact(result.artifacts[0].path)
    assert "--deselect tests/test_" in art.test_script and "::test_flaky_" in art.test_script


HANGING_TESTS = '''import time


def test_zz_hangs():
    time.sleep(300)
'''

SLOW_TESTS = '''import time


def test_slowish_a():
    time.sleep(1.2)


def test_slowish_b():
    time.sleep(1.2)


def test_slowish_c():
    time.sleep(1.2)


def test_slowish_d():
    time.sleep(1.2)


def test_slowish_e():
    time.sleep(300)  # skipped: its file's tests already took longer than one run may
'''

_FAST_OPTIONS = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "SSRKIT_COV_FLUSH": "0"}  # flush after every test


def _factory(env):
    from ssrkit.sandbox import SandboxOptions, open_sandbox

    options = SandboxOptions(env=env)
    return lambda src: open_sandbox(src, "local", options)


def test_a_suite_cut_at_the_coverage_timeout_still_maps_what_ran(tmp_path):
    repo = _repo(tmp_path, "hang", _calc_files(**{
        "tests/test_slow.py": HANGING_TESTS, "ssrkit.toml": "[inject]\ncoverage_timeout = 8\n",
        "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"}))
    result = inject(repo, tmp_path / "out", n=1, strategies="expression", sandbox_factory=_factory(_FAST_OPTIONS))
    assert any("did not finish within its coverage timeout (8s)" in n for n in result.notes), result.notes
    assert len(result.artifacts) == 1
    assert "tests/test_slow.py" not in Artifact(result.artifacts[0].path).test_files


def test_a_test_longer_than_one_run_is_cut_and_a_slow_file_not_selected(tmp_path):
    """One test past a third of a run's budget (1.5 s) is cut; a file whose passing tests outlast the budget
    (4.5 s) has the rest skipped (it is never selected: measuring more of it would only delay the map)."""
    repo = _repo(tmp_path, "slow", _calc_files(**{
        "tests/test_slow.py": SLOW_TESTS, "tests/test_hang.py": "def test_quick():\n    pass\n\n\n" + HANGING_TESTS,
        "ssrkit.toml": "[validate]\ntimeout = 4.5\n",
        "pyproject.toml": "[tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"}))
    with Session(repo, tmp_path / "s", sandbox_factory=_factory(_FAST_OPTIONS)) as s:
        s.setup(history=False)
        tm = s.testmap
        assert tm.complete and tm.cut == {"tests/test_hang.py::test_zz_hangs"}
        assert tm.outcomes["tests/test_hang.py::test_zz_hangs"] == "failed"
        assert tm.files_cut == {"tests/test_slow.py"}
        assert tm.outcomes["tests/test_slow.py::test_slowish_d"] == "passed"
        assert tm.outcomes["tests/test_slow.py::test_slowish_e"] == "skipped"
        assert tm.seconds < 60  # test_slowish_e's 300 s never ran
        assert any("excluded 1 test cut after 1.5s under coverage" in n and "test_zz_hangs" in n for n in s.notes)
        assert any("not selecting 1 test file" in n and "tests/test_slow.py (cut at 5s)" in n for n in s.notes), \
            s.notes
        assert "tests/test_slow.py" not in s.repo.usable_files


def test_unittest_a_slow_file_has_the_rest_of_its_tests_skipped_under_coverage(tmp_path):
    slow = ("import time\nimport unittest\n\n\nclass TestSlow(unittest.TestCase):\n"
            + "".join(f"    def test_{c}(self):\n        time.sleep(1.2)\n\n" for c in "abcd")
            + "    def test_e(self):\n        time.sleep(300)\n")
    quick = "import unittest\n\n\nclass TestQuick(unittest.TestCase):\n    def test_q(self):\n        pass\n"
    repo = _repo(tmp_path, "uslow", {"tests/__init__.py": "", "tests/test_slow.py": slow, "tests/test_quick.py": quick,
                                     "ssrkit.toml": "[validate]\ntimeout = 4.5\n[inject]\nrunner = \"unittest\"\n"})
    with Session(repo, tmp_path / "s", sandbox_factory=_factory(_FAST_OPTIONS)) as s:
        s.setup(history=False)
        tm = s.testmap
        assert tm.files_cut == {"tests/test_slow.py"} and tm.seconds < 60
        assert tm.outcomes["tests.test_slow.TestSlow.test_d"] == "passed"
        assert tm.outcomes["tests.test_slow.TestSlow.test_e"] == "skipped"
        assert tm.outcomes["tests.test_quick.TestQuick.test_q"] == "passed"
        assert "tests/test_slow.py" not in s.repo.usable_files


GENERATED_TESTS = '''from calc.ops import clamp, mean


class TestGenerated:
    """Tests attached at import, from a table (as fixture-driven suites do): no `def` to remove."""


def _attach(name, call, want):
    def test(self):
        assert call() == want

    setattr(TestGenerated, name, test)


for _i, (_v, _want) in enumerate([(5, 5), (-1, 0), (11, 10), (0, 0)]):
    _attach(f"test_clamp_{_i}", lambda v=_v: clamp(v, 0, 10), _want)
for _i, (_items, _want) in enumerate([([2], 2.0), ([1, 3], 2.0)]):
    _attach(f"test_mean_{_i}", lambda items=_items: mean(items), _want)
'''


def test_a_failing_test_without_a_definition_is_known_unweakenable_from_the_pre_screen(tmp_path, sandbox_factory):
    """Generated tests cannot be removed: a candidate whose only covering tests are such is discarded before
    any run; one where such a test fails beside a removable one in another file becomes an artifact of that
    file alone (the generated test's file is never selected); a history revert, which runs every file it
    selects, is unweakenable after the pre-screen (no run of the selected files)."""
    from ssrkit.inject.candidates import Candidate

    repo = _repo(tmp_path, "gen", _calc_files(**{"tests/test_gen.py": GENERATED_TESTS}))
    with Session(repo, tmp_path / "out", sandbox_factory=sandbox_factory) as s:
        s.setup(history=False)
        passing = s.testmap.passing()
        assert "tests/test_gen.py::TestGenerated::test_clamp_2" in passing

        def mutation(old, new, tests):
            text = CALC_OPS.replace(old, new)
            assert text != CALC_OPS
            return Candidate("expression", 0, "manual", "calc/ops.py", "hand-made", line=1,
                             files={"calc/ops.py": text}, prescreen_tests=sorted(t for t in passing if tests in t))

        only_generated = s.evaluate(mutation("return total(items) / len(items)",
                                             "return total(items) // len(items)", "test_gen.py::TestGenerated::test_mean"))
        assert (only_generated.status, only_generated.runs) == ("unweakenable", 0), only_generated.message
        both = mutation("        return high\n    return value", "        return low\n    return value", "clamp")
        other_file = s.evaluate(both)
        assert other_file.status == "valid", other_file.message
        art = Artifact(other_file.artifact)
        assert art.test_files == ["tests/test_ops.py"]
        assert art.validation["fail_to_pass"] == ["tests/test_ops.py::test_clamp_high"]
        revert = s.evaluate(replace(both, strategy="history", line=None,
                                    test_files=("tests/test_gen.py", "tests/test_ops.py")))
        assert revert.status == "unweakenable" and revert.runs == 1, revert.message
        assert "test_gen.py::TestGenerated::test_clamp_" in revert.message


MORE_CLAMP_TESTS = '''from calc.ops import clamp


def test_more_a():
    assert clamp(3, 0, 5) == 3


def test_more_b():
    assert clamp(-3, 0, 5) == 0


def test_more_c():
    assert clamp(9, 0, 5) == 5


def test_more_d():
    assert clamp(5, 0, 5) == 5


def test_more_e():
    assert clamp(0, 0, 5) == 0
'''


def test_the_selection_is_the_covering_file_where_the_bug_showed_first(tmp_path, sandbox_factory):
    """Two test files run the changed line; the artifact's tests are the file of the pre-screen's first
    failure (the cheapest covering test that failed), not every covering file: each run costs that file."""
    from ssrkit.inject.candidates import Candidate

    repo = _repo(tmp_path, "two", _calc_files(**{"tests/test_clamp_more.py": MORE_CLAMP_TESTS}))
    with Session(repo, tmp_path / "out", sandbox_factory=sandbox_factory) as s:
        s.setup(history=False)
        covering = sorted(t for t in s.testmap.passing() if t.endswith(("test_more_c", "test_clamp_high")))
        assert len(covering) == 2
        bug = CALC_OPS.replace("        return high\n    return value", "        return low\n    return value")
        out = s.evaluate(Candidate("expression", 0, "manual", "calc/ops.py::clamp", "hand-made", line=9,
                                   files={"calc/ops.py": bug}, prescreen_tests=covering))
        assert out.status == "valid", out.message
        art = Artifact(out.artifact)
        assert art.test_files == ["tests/test_clamp_more.py"]
        assert art.validation["fail_to_pass"] == ["tests/test_clamp_more.py::test_more_c"]


def test_a_cli_run_that_writes_nothing_says_why(tmp_path, monkeypatch, capsys):
    """Only failing tests: no traceback, exit 1, the diagnosis names the stage and the setting."""
    import ssrkit.inject.procedural as procedural
    from ssrkit.cli.main import main

    repo = _repo(tmp_path, "allfail", {"calc/__init__.py": "", "calc/ops.py": CALC_OPS,
                                       "tests/test_ops.py": "from calc.ops import clamp\n\n\ndef test_a():\n"
                                                            "    assert clamp(1, 0, 2) == 0\n"})
    monkeypatch.setattr(procedural, "open_sandbox", lambda source, backend, options: local_sandbox(source))
    with pytest.raises(SystemExit) as exc:
        main(["inject", str(repo), "--out", str(tmp_path / "out"), "--n", "1"])
    out, err = capsys.readouterr()
    assert exc.value.code == 1, out + err
    assert "Traceback" not in out + err
    assert "why:" in out and "no test passes on the original code" in out
    data = json.loads((tmp_path / "out" / "inject.json").read_text())
    assert data["run"]["diagnosis"] and data["run"]["tests"] == 1


# -- 4. a virtualenv without coverage; unittest suites with subtests ----------------------------------------

SUBTESTS = '''

class TestScaleSubtests(unittest.TestCase):
    def test_factors(self):
        for f in (1, 2, 5):
            with self.subTest(factor=f):
                self.assertEqual(scale([1, 2], f), [f, 2 * f])
'''
UNITS_FILES = {"units/__init__.py": "", "units/ops.py": UNITS_OPS, "tests/__init__.py": "",
               "tests/test_ops.py": UNITS_TEST + SUBTESTS}


def test_a_virtualenv_without_coverage_uses_ssrkits_copy(tmp_path, monkeypatch, sandbox_factory):
    repo = _repo(tmp_path, "nocov", UNITS_FILES)
    venv = _venv(tmp_path, with_pytest=False)
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import coverage"], capture_output=True)
    assert probe.returncode != 0  # the situation: this environment has no coverage
    _activate(monkeypatch, venv)
    result = inject(repo, tmp_path / "out", n=1, strategies="expression", sandbox_factory=sandbox_factory)
    assert result.runner == "unittest" and len(result.artifacts) == 1
    assert "from ssrkit" in result.tracer
    assert any("per-test coverage measured by" in n and "ssrkit" in n for n in result.notes)
    assert result.n_tests == 8  # subtests are reported under their test


def test_the_environments_own_coverage_is_preferred(tmp_path, sandbox_factory):
    repo = _repo(tmp_path, "owncov", UNITS_FILES)
    with Session(repo, tmp_path / "s", sandbox_factory=sandbox_factory) as s:
        s.setup(history=False)
        assert "from the environment" in s.testmap.tracer


# -- tests defined in another module: a class imported into the test module, or an imported base class ------

def test_tests_of_imported_classes_are_located_where_they_are_defined():
    from ssrkit.inject.weaken import relocate

    files = {
        "tests/pkg/test_base.py": "class TestBase:\n    def test_a(self):\n        assert True\n",
        "tests/pkg/test_sub.py": "from pkg.test_base import TestBase\n\n\nclass TestSub(TestBase):\n    pass\n",
        "tests/pkg/test_rel.py": "from .test_base import TestBase as Base\n\n\nclass TestRel(Base):\n"
                                 "    def test_own(self):\n        pass\n",
    }
    read = files.__getitem__
    base = TestLocation("tests/pkg/test_base.py", ("TestBase",), "test_a")
    assert relocate(TestLocation("tests/pkg/test_sub.py", ("TestBase",), "test_a"), read, files) == base
    assert relocate(TestLocation("tests/pkg/test_sub.py", ("TestSub",), "test_a"), read, files) == base
    assert relocate(TestLocation("tests/pkg/test_rel.py", ("TestRel",), "test_a"), read, files) == base
    own = TestLocation("tests/pkg/test_rel.py", ("TestRel",), "test_own")
    assert relocate(own, read, files) == own
    assert remove_tests(files["tests/pkg/test_base.py"], [base], base.file) == ""


def test_a_python_the_sandbox_cannot_find_says_to_activate_the_virtualenv(tmp_path, sandbox_factory):
    from ssrkit.errors import SsrkitError

    repo = _repo(tmp_path, "nopython", _calc_files(**{"ssrkit.toml": '[inject]\npython = "python-not-installed"\n'}))
    with Session(repo, tmp_path / "s", sandbox_factory=sandbox_factory) as s:
        with pytest.raises(SsrkitError, match="python-not-installed.*not found in the sandbox.*activate the "
                                              "repository's virtualenv"):
            s.setup(history=False)
