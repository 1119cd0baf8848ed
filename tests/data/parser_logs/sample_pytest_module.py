import unittest
import pytest

def test_pass():
    assert True

def test_fail():
    assert 1 == 2, "one is not two"

@pytest.mark.parametrize("s", ["a b", "x - y", "[br]", "1-2", "é", "tail - ", "a]b - c"])
def test_param(s):
    assert "y" not in s and "c" not in s

@pytest.mark.parametrize("a,b", [(1, 2), (3, 4)])
def test_two(a, b):
    assert a < b

@pytest.mark.skip(reason="not today")
def test_skipped():
    pass

@pytest.mark.parametrize("n", [1, 2])
def test_skip_param(n):
    pytest.skip(f"skip {n}")

@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert False

@pytest.mark.xfail(reason="fixed?")
def test_xpass():
    assert True

@pytest.fixture
def broken():
    raise RuntimeError("fixture exploded")

def test_setup_error(broken):
    pass

@pytest.fixture
def bad_teardown():
    yield 1
    raise RuntimeError("teardown exploded")

def test_teardown_error(bad_teardown):
    assert bad_teardown == 1

class TestGroup:
    def test_method(self):
        assert True
    @pytest.mark.parametrize("v", ["p q"])
    def test_m_param(self, v):
        assert False

class TestUnit(unittest.TestCase):
    def test_ok(self):
        self.assertTrue(True)
    def test_sub(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)
    @unittest.skip("unittest skip")
    def test_uskip(self):
        pass
