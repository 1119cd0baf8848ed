"""The test-log parser templates in src/ssrkit/templates/.

The logs under tests/data/parser_logs/ were captured by really running
sample_pytest_module.py (as tests/test_mix.py, plus a tests/test_broken.py that
fails to import) with pytest 9.2 and pytest 7.4, and sample_unittest_module.py (as
tests/test_u.py) with ``python -m unittest -v`` on CPython 3.10, 3.11 and 3.13.
The live tests at the end run the installed pytest/unittest again.
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from fixtures.paths import SRC, TESTS

TEMPLATES = SRC / "ssrkit" / "templates"
LOGS = TESTS / "data" / "parser_logs"


def load(name):
    spec = importlib.util.spec_from_file_location(f"_template_{name}", TEMPLATES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pytest_parser = load("pytest_parser")
unittest_parser = load("unittest_parser")

M = "tests/test_mix.py::"
PYTEST_COMMON = {
    M + "test_pass": "passed",
    M + "test_fail": "failed",
    M + "test_param[a b]": "passed",
    M + "test_param[x - y]": "failed",
    M + "test_param[[br]]": "passed",
    M + "test_param[1-2]": "passed",
    M + "test_param[\\xe9]": "passed",
    M + "test_param[tail - ]": "passed",
    M + "test_param[a]b - c]": "failed",
    M + "test_two[1-2]": "passed",
    M + "test_two[3-4]": "passed",
    M + "test_xfail": "passed",
    M + "test_xpass": "xpassed",  # non-strict XPASS: its own status, a failure for a required test
    M + "test_setup_error": "error",
    M + "test_teardown_error": "error",  # passed, then failed in teardown
    M + "TestGroup::test_method": "passed",
    M + "TestGroup::test_m_param[p q]": "failed",
    M + "TestUnit::test_ok": "passed",
    M + "TestUnit::test_sub": "failed",  # one failing subtest
}
# without -v the summary names skipped tests only by file:line, which is no test id: they are left out
PYTEST_RA = dict(PYTEST_COMMON)
PYTEST_RA_V = {
    **PYTEST_COMMON,
    M + "test_skipped": "skipped",
    M + "test_skip_param[1]": "skipped",
    M + "test_skip_param[2]": "skipped",
    M + "TestUnit::test_uskip": "skipped",
}

U = "tests.test_u."
UNITTEST = {
    U + "TestSetupClassFails.setUpClass": "error",
    U + "TestThings.test_doc": "passed",
    U + "TestThings.test_doc_fail": "failed",
    U + "TestThings.test_error": "error",
    U + "TestThings.test_fail": "failed",
    U + "TestThings.test_ok": "passed",
    U + "TestThings.test_prints": "passed",
    U + "TestThings.test_skip": "skipped",
    U + "TestThings.test_subtests": "failed",
    U + "TestThings.test_subtests_ok": "passed",
    U + "TestThings.test_xfail": "passed",
    U + "TestThings.test_xpass": "failed",
    "unittest.loader._FailedTest.test_broken": "error",
}


def run_script(template, log):
    proc = subprocess.run(
        [sys.executable, str(TEMPLATES / f"{template}.py")], input=log.encode(), capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    assert out.count("\n") == 1, "exactly one line of output"
    return json.loads(out, object_pairs_hook=no_duplicates)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)


# ------------------------------------------------------------------ pytest


@pytest.mark.parametrize(
    "log, expected",
    [
        ("pytest9_rA.log", PYTEST_RA),
        ("pytest7_rA.log", PYTEST_RA),
        ("pytest9_rA_v.log", PYTEST_RA_V),
        ("pytest7_rA_v.log", PYTEST_RA_V),
        ("pytest9_collection_error.log", {"tests/test_broken.py": "error"}),
        ("pytest7_collection_error.log", {"tests/test_broken.py": "error"}),
    ],
)
def test_pytest_captured_logs(log, expected):
    text = (LOGS / log).read_text(encoding="utf-8")
    assert pytest_parser.parse(text) == expected
    assert run_script("pytest_parser", text) == expected


def test_pytest_ignores_lines_outside_the_summary():
    log = (
        "captured stdout: PASSED tests/test_x.py::test_fake\n"
        "===== short test summary info =====\n"
        "FAILED tests/test_x.py::test_real - AssertionError: PASSED tests/test_x.py::x\n"
        "===== 1 failed in 0.01s =====\n"
        "PASSED tests/test_x.py::test_after\n"
    )
    assert pytest_parser.parse(log) == {"tests/test_x.py::test_real": "failed"}


def test_pytest_strips_colors():
    log = (
        "\x1b[36m\x1b[1m=========================== short test summary info ============================\x1b[0m\n"
        "\x1b[32mPASSED\x1b[0m tests/test_a.py::\x1b[1mtest_ok\x1b[0m\n"
        "\x1b[31mFAILED\x1b[0m tests/test_a.py::\x1b[1mtest_bad[1 - 2]\x1b[0m - assert 1 == 2\n"
        "\x1b[31m========================= 1 failed, 1 passed in 0.01s ==========================\x1b[0m\n"
    )
    assert pytest_parser.parse(log) == {
        "tests/test_a.py::test_ok": "passed",
        "tests/test_a.py::test_bad[1 - 2]": "failed",
    }


def test_pytest_xdist_progress_lines():
    log = (
        "[gw0] [ 50%] PASSED tests/test_a.py::test_one[a - b]\n"
        "[gw1] [100%] FAILED tests/test_a.py::test_two\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/test_a.py::test_two - assert 0\n"
        "========================= 1 failed, 1 passed in 0.51s ==========================\n"
    )
    assert pytest_parser.parse(log) == {
        "tests/test_a.py::test_one[a - b]": "passed",
        "tests/test_a.py::test_two": "failed",
    }


def test_pytest_known_verbose_ids_settle_ambiguous_messages():
    # the id itself ends in "] - b]"; only the -v progress line tells where it ends
    log = (
        "tests/test_a.py::test_p[a] - b] FAILED                                    [100%]\n"
        "=========================== short test summary info ============================\n"
        "FAILED tests/test_a.py::test_p[a] - b] - AssertionError: boom\n"
        "============================== 1 failed in 0.01s ===============================\n"
    )
    assert pytest_parser.parse(log) == {"tests/test_a.py::test_p[a] - b]": "failed"}


def test_pytest_empty_and_garbage_logs():
    assert pytest_parser.parse("") == {}
    assert pytest_parser.parse("Traceback (most recent call last):\nSyntaxError: invalid syntax\n") == {}
    assert run_script("pytest_parser", "") == {}


def test_pytest_parse_is_deterministic():
    text = (LOGS / "pytest9_rA_v.log").read_text(encoding="utf-8")
    assert run_script("pytest_parser", text) == run_script("pytest_parser", text)


# ------------------------------------------------------------------ unittest


@pytest.mark.parametrize("log", ["unittest_py310.log", "unittest_py311.log", "unittest_py313.log"])
def test_unittest_captured_logs(log):
    text = (LOGS / log).read_text(encoding="utf-8")
    assert unittest_parser.parse(text) == UNITTEST
    assert run_script("unittest_parser", text) == UNITTEST


def test_unittest_status_after_test_output():
    log = (
        "test_a (tests.t.T.test_a) ... printing: all ok\n"
        "FAIL\n"
        "test_b (tests.t.T.test_b) ... some output\n"
        "more output ending in ok\n"
        "test_c (tests.t.T.test_c) ... ok\n"
    )
    assert unittest_parser.parse(log) == {
        "tests.t.T.test_a": "failed",
        "tests.t.T.test_b": "passed",
        "tests.t.T.test_c": "passed",
    }


def test_unittest_multiline_docstring_and_skip_reasons():
    log = (
        "test_doc (tests.t.T.test_doc)\n"
        "Checks the thing ... skipped 'needs network ... really'\n"
        "test_old (tests.t.T) ... expected failure\n"
        "test_new (tests.t.T.test_new) ... unexpected success\n"
        "\n"
        "----------------------------------------------------------------------\n"
        "Ran 3 tests in 0.001s\n"
    )
    assert unittest_parser.parse(log) == {
        "tests.t.T.test_doc": "skipped",
        "tests.t.T.test_old": "passed",
        "tests.t.T.test_new": "failed",
    }


def test_unittest_empty_and_garbage_logs():
    assert unittest_parser.parse("") == {}
    assert unittest_parser.parse("Traceback (most recent call last):\nImportError: nope\n") == {}
    assert run_script("unittest_parser", "garbage\n") == {}


# ------------------------------------------------------------------ live runs


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@pytest.fixture
def sample_project(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    shutil.copy(LOGS / "sample_pytest_module.py", tmp_path / "tests" / "test_mix.py")
    shutil.copy(LOGS / "sample_unittest_module.py", tmp_path / "tests" / "test_u.py")
    (tmp_path / "tests" / "test_broken.py").write_text("import nonexistent_module_xyz\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


# pytest >= 8.3: --no-fold-skipped prints `SKIPPED id - reason`, so -rA alone keys skips by node id
@pytest.mark.parametrize("extra, expected", [([], PYTEST_RA), (["-v"], PYTEST_RA_V),
                                             (["--no-fold-skipped"], PYTEST_RA_V)])
def test_pytest_live(sample_project, extra, expected):
    cmd = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests/test_mix.py", *extra]
    proc = subprocess.run(cmd, cwd=sample_project, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert pytest_parser.parse(proc.stdout + proc.stderr) == expected


def test_pytest_skips_and_xpass_in_the_summary():
    log = (
        "=========================== short test summary info ============================\n"
        "SKIPPED [2] tests/test_a.py:7: folded, names no test\n"
        "SKIPPED tests/test_a.py::test_s[a b] - Skipped: why - not\n"
        "XPASS tests/test_a.py::test_x - reason\n"
        "FAILED tests/test_a.py::test_strict - [XPASS(strict)] reason\n"
        "=================== 1 failed, 1 skipped, 1 xpassed in 0.01s ====================\n"
    )
    assert pytest_parser.parse(log) == {
        "tests/test_a.py::test_s[a b]": "skipped",
        "tests/test_a.py::test_x": "xpassed",
        "tests/test_a.py::test_strict": "failed",
    }


def test_unittest_live(sample_project):
    cmd = [sys.executable, "-m", "unittest", "-v", "tests.test_u", "tests.test_broken"]
    proc = subprocess.run(cmd, cwd=sample_project, capture_output=True, text=True, env=clean_env(), timeout=120)
    assert unittest_parser.parse(proc.stdout + proc.stderr) == UNITTEST


def test_pytest_subtests_plugin_lines():
    # format of the pytest-subtests plugin used before pytest 9
    log = (
        "=========================== short test summary info ============================\n"
        "SUBFAIL tests/test_a.py::TestU::test_sub (i=2) - AssertionError: 2 not less than 2\n"
        "PASSED tests/test_a.py::TestU::test_sub\n"
        "PASSED tests/test_a.py::TestU::test_ok\n"
        "==================== 1 failed, 2 passed in 0.01s ====================\n"
    )
    assert pytest_parser.parse(log) == {
        "tests/test_a.py::TestU::test_sub": "failed",
        "tests/test_a.py::TestU::test_ok": "passed",
    }
