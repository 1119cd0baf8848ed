"""Weakening removes exactly the given test definitions (whole, decorators included) and nothing else."""

from __future__ import annotations

import pytest

from ssrkit.inject.runner import PYTEST, UNITTEST, Profile, TestLocation, locate_test, module_of
from ssrkit.inject.weaken import WeakenError, remove_tests

TESTS = '''import pytest

from pkg import f


def test_a():
    assert f(1) == 1


# regression for issue 12
@pytest.mark.parametrize("x", [1, 2])
@pytest.mark.slow
def test_b(x):
    assert f(x) == x


def test_c():
    assert f(3) == 3


class TestK:
    def test_k1(self):
        assert f(1)

    def test_k2(self):
        assert f(2)


class TestOnlySetup:
    def setUp(self):
        self.x = 1

    def test_only(self):
        assert self.x
'''


def loc(*names: str) -> TestLocation:
    return TestLocation("tests/test_x.py", tuple(names[:-1]), names[-1])


def test_parametrized_test_goes_whole_with_decorators_and_its_comment():
    new = remove_tests(TESTS, [loc("test_b")])
    assert new == TESTS.replace('''

# regression for issue 12
@pytest.mark.parametrize("x", [1, 2])
@pytest.mark.slow
def test_b(x):
    assert f(x) == x
''', "")
    assert "def test_a" in new and "def test_c" in new


def test_method_goes_and_a_class_without_tests_goes_whole():
    new = remove_tests(TESTS, [loc("TestK", "test_k1")])
    assert "test_k1" not in new and "def test_k2(self):" in new and "class TestK:\n    def test_k2" in new
    new = remove_tests(TESTS, [loc("TestK", "test_k1"), loc("TestK", "test_k2")])
    assert "TestK" not in new and new.endswith("        assert self.x\n")
    new = remove_tests(TESTS, [loc("TestOnlySetup", "test_only")])
    assert "TestOnlySetup" not in new and "setUp" not in new
    assert new.endswith("        assert f(2)\n")


def test_nothing_else_changes():
    new = remove_tests(TESTS, [loc("test_c")])
    assert new == TESTS.replace("\n\ndef test_c():\n    assert f(3) == 3\n", "")


def test_inherited_test_is_removed_from_its_base():
    text = ("import unittest\n\n\nclass Base:\n    def test_shared(self):\n        pass\n\n    def test_other(self):\n"
            "        pass\n\n\nclass TestA(Base, unittest.TestCase):\n    pass\n")
    new = remove_tests(text, [TestLocation("t.py", ("TestA",), "test_shared")])
    assert "test_shared" not in new and "class Base:" in new and "test_other" in new


def test_unknown_test_is_an_error():
    with pytest.raises(WeakenError):
        remove_tests(TESTS, [loc("test_nope")])
    with pytest.raises(WeakenError):
        remove_tests(TESTS, [loc("TestNope", "test_k1")])


def test_locate_pytest_and_unittest_ids():
    assert locate_test("tests/test_x.py::TestK::test_k1", PYTEST) == loc("TestK", "test_k1")
    assert locate_test("tests/test_x.py::test_b[1-a b]", PYTEST) == loc("test_b")
    assert locate_test("tests/test_x.py", PYTEST) is None  # a collection error names no function
    files = ["tests/test_other.py", "tests/test_x.py"]
    assert locate_test("tests.test_x.TestK.test_k1", UNITTEST, {}, files) == loc("TestK", "test_k1")
    assert locate_test("test_k1 (tests.test_x.TestK)", UNITTEST, {}, files) == loc("TestK", "test_k1")
    assert locate_test("tests.test_x.TestK.setUpClass", UNITTEST, {}, files) is None
    known = {"tests.test_x.TestK.test_k1": "tests/test_x.py"}
    assert locate_test("tests.test_x.TestK.test_k1", UNITTEST, known) == loc("TestK", "test_k1")


def test_scripts_for_both_runners():
    p = Profile(PYTEST, args=["-p", "no:randomly"])
    assert p.script(["tests/a.py", "tests/b c.py"], ["tests/a.py::test_flaky"]) == (
        "#!/usr/bin/env bash\npython -m pytest -rA -p no:cacheprovider -p no:randomly "
        "--deselect tests/a.py::test_flaky tests/a.py 'tests/b c.py'\n")
    assert p.failfast_command(["tests/a.py::test_x[1]"]) == \
        "python -m pytest -x -q -rfE -p no:cacheprovider -p no:randomly 'tests/a.py::test_x[1]'"
    assert p.failfast_command(["tests/b.py::t", "tests/a.py::t"], maxfail=2) == \
        "python -m pytest --maxfail=2 -q -rfE -p no:cacheprovider -p no:randomly tests/b.py::t tests/a.py::t"
    u = Profile(UNITTEST, python="python3")
    assert u.script(["tests/test_a.py", "test_top.py"]) == \
        "#!/usr/bin/env bash\npython3 -m unittest -v tests.test_a test_top 2>&1\n"
    assert module_of("a/b/test_c.py") == "a.b.test_c"
    assert "def parse" in p.parser() and "unittest" in u.parser()
