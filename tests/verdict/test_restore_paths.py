"""Which paths grading puts back before a fix's tests run, written once (verdict/patterns.py) for `ssrkit solve`
and the exported grader (#27 step 3.2)."""

from __future__ import annotations

import pytest

from ssrkit.verdict.patterns import DEFAULT_PROTECTED, DEFAULT_TEST_PATTERNS, paths_to_restore

pytestmark = pytest.mark.fast

PATTERNS = [*DEFAULT_TEST_PATTERNS, *DEFAULT_PROTECTED]


def test_listed_test_files_then_touched_protected_files_then_new_shadowing_modules():
    paths, shadows = paths_to_restore(
        test_files=["tests/test_calc.py"],
        touched=["calc.py", "tests/test_calc.py", "tests/conftest.py", "setup.cfg", "calc.py"],
        fix_targets=["calc.py", "json.py", "src/typing.py", "pkg/json.py", "pytest.py", None, "json.py"],
        patterns=PATTERNS, guard_shadows=True, exists_originally=lambda p: p == "src/typing.py")
    assert paths == ["tests/test_calc.py", "tests/conftest.py", "setup.cfg"]
    # json.py at the root shadows the standard library, pytest.py the runner; src/typing.py is the repository's
    # own; pkg/json.py is not at an import root
    assert shadows == ["json.py", "pytest.py"]


def test_without_the_shadow_guard_no_module_is_deleted_and_no_original_is_read():
    read = []
    paths, shadows = paths_to_restore(["t/test_a.py"], ["t/test_a.py"], ["json.py"], PATTERNS, False,
                                      lambda p: read.append(p) or False)
    assert (paths, shadows, read) == (["t/test_a.py"], [], [])


def test_a_shadow_is_judged_by_the_names_given():
    _, shadows = paths_to_restore([], [], ["json.py", "mylib.py"], PATTERNS, True, lambda p: False,
                                  shadow_names=frozenset({"mylib"}))
    assert shadows == ["mylib.py"]
