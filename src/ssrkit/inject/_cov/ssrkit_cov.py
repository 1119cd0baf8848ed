"""Per-test coverage for ssrkit: one coverage context per test, and each test's outcome.

Loaded at interpreter start (sitecustomize) when SSRKIT_COV_DIR is set. Coverage is started from the
COVERAGE_PROCESS_START configuration; each unittest TestCase run switches the context to the test's id
(`module.Class.method`), and under pytest the companion plugin ssrkit_cov_pytest switches it to the node id.
Outcomes and the file of each test are written to SSRKIT_COV_DIR/outcomes-<pid>.json at exit.
"""

import atexit
import json
import os
import sys

RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}
_cov = None
_outcomes = {}
_files = {}
under_pytest = False


def start():
    global _cov
    out = os.environ["SSRKIT_COV_DIR"]
    try:
        import coverage
    except ImportError:
        with open(os.path.join(out, "no-coverage"), "w") as fh:
            fh.write(sys.executable + "\n")
        return
    coverage.process_startup()
    _cov = coverage.Coverage.current()
    if _cov is None:
        return
    _patch_unittest()
    atexit.register(_save)


def begin(test_id, path):
    if _cov is not None:
        _cov.switch_context(test_id)
    if path:
        _files[test_id] = os.path.abspath(str(path))


def end():
    if _cov is not None:
        _cov.switch_context("")


def outcome(test_id, status):
    old = _outcomes.get(test_id)
    if old is None or RANK[status] > RANK[old]:
        _outcomes[test_id] = status


def _save():
    out = os.environ.get("SSRKIT_COV_DIR")
    if not out or not (_outcomes or _files):
        return
    path = os.path.join(out, "outcomes-%d.json" % os.getpid())
    with open(path + ".tmp", "w") as fh:
        json.dump({"outcomes": _outcomes, "files": _files}, fh)
    os.replace(path + ".tmp", path)


def _patch_unittest():
    import unittest.case

    original = unittest.case.TestCase.run

    def run(self, result=None):
        if under_pytest or result is None:
            return original(self, result)
        test_id = self.id()
        lists = ("errors", "failures", "unexpectedSuccesses", "skipped")
        before = [len(getattr(result, name, ())) for name in lists]
        module = sys.modules.get(type(self).__module__)
        begin(test_id, getattr(module, "__file__", None))
        try:
            return original(self, result)
        finally:
            end()
            after = [len(getattr(result, name, ())) for name in lists]
            if after[0] > before[0]:
                outcome(test_id, "error")
            elif after[1] > before[1] or after[2] > before[2]:
                outcome(test_id, "failed")
            elif after[3] > before[3]:
                outcome(test_id, "skipped")
            else:
                outcome(test_id, "passed")

    unittest.case.TestCase.run = run
