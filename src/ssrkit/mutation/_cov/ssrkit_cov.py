"""Per-test coverage for ssrkit: one coverage context per test, and each test's outcome.

Loaded at interpreter start (sitecustomize) when SSRKIT_COV_DIR is set. Coverage is started from the
COVERAGE_PROCESS_START configuration; each unittest TestCase run switches the context to the test's id
(`module.Class.method`), and under pytest the companion plugin ssrkit_cov_pytest switches it to the node id.
Outcomes, durations and the file of each test are written to SSRKIT_COV_DIR/outcomes-<pid>.json at exit,
with the tracer that measured them, pytest's doctest items and the files that errored at collection; both
they and the coverage data are also flushed every FLUSH_SECONDS between tests, so a suite cut at its
timeout still leaves a map of the tests that ran. With SSRKIT_COV_TEST_LIMIT set, a test running longer
than that many seconds is interrupted (SIGALRM, when the process does not use it itself), recorded as
failed and listed as cut: one slow test does not eat the whole suite's time. With SSRKIT_COV_FILE_LIMIT
set, a test file whose passing tests have taken longer than that many seconds has its remaining tests
skipped and is listed in `files_cut`: such a file is never selected (one run of it would outlast the
test budget), so measuring the rest of it would only delay the map.

When the Python running the tests has no `coverage` of its own, the copy in SSRKIT_COV_VENDOR (ssrkit's,
pure Python plus its C tracer when the ABI matches) is appended to sys.path: it never shadows the
repository's own packages. The C tracer is used when it imports, else the Python tracer (sys.monitoring
does not support the per-test contexts).
"""

import atexit
import json
import os
import signal
import sys
import time

RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}


def _seconds(name, default):
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return float(default)


FLUSH_SECONDS = _seconds("SSRKIT_COV_FLUSH", 15.0)
_cov = None
_outcomes = {}
_files = {}
_doctests = set()
_broken = {}
_tracer = ""
_durations = {}
_current = [None, 0.0]  # test id, start time
_last_flush = [time.monotonic()]
_cut = set()
TEST_LIMIT = _seconds("SSRKIT_COV_TEST_LIMIT", 0.0)
FILE_LIMIT = _seconds("SSRKIT_COV_FILE_LIMIT", 0.0)
_file_seconds = {}  # test file -> seconds its passing tests took so far
_files_cut = set()


class TestTooSlow(BaseException):
    """Raised in a test that ran past SSRKIT_COV_TEST_LIMIT (a BaseException: no test framework swallows it)."""


def _alarm(signum, frame):
    if _current[0] is not None:
        _cut.add(_current[0])
    raise TestTooSlow("ssrkit: this test ran longer than %gs under coverage" % TEST_LIMIT)


def _arm(on):
    if TEST_LIMIT <= 0 or not hasattr(signal, "setitimer"):
        return
    try:
        if on:
            if signal.getsignal(signal.SIGALRM) not in (signal.SIG_DFL, _alarm):
                return  # the tests use SIGALRM themselves
            signal.signal(signal.SIGALRM, _alarm)
            signal.setitimer(signal.ITIMER_REAL, TEST_LIMIT)
        elif signal.getsignal(signal.SIGALRM) is _alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except (ValueError, OSError):
        pass  # not the main thread
under_pytest = False


def import_coverage():
    """(the coverage module, "environment" | "ssrkit"), or (None, "") when neither copy imports."""
    # coverage exits at import when COVERAGE_CORE=ctrace and its C tracer is missing: choose after importing
    os.environ.pop("COVERAGE_CORE", None)
    try:
        import coverage
        return coverage, "environment"
    except ImportError:
        pass
    vendor = os.environ.get("SSRKIT_COV_VENDOR")
    if vendor and os.path.isdir(vendor):
        sys.path.append(vendor)
        try:
            import coverage
            return coverage, "ssrkit"
        except ImportError:
            sys.path.remove(vendor)
    return None, ""


def start():
    global _cov, _tracer
    out = os.environ["SSRKIT_COV_DIR"]
    coverage, origin = import_coverage()
    if coverage is None:
        with open(os.path.join(out, "no-coverage"), "w") as fh:
            fh.write(sys.executable + "\n")
        return
    core = getattr(coverage, "core", None)
    if core is not None and hasattr(core, "CTRACER_FILE"):
        os.environ["COVERAGE_CORE"] = "ctrace" if core.CTRACER_FILE else "pytrace"
    coverage.process_startup()
    _cov = coverage.Coverage.current()
    if _cov is None:
        return
    core_obj = getattr(_cov, "_core", None)
    name = getattr(getattr(core_obj, "tracer_class", None), "__name__", "") or "CTracer or PyTracer"
    _tracer = "%s (coverage %s from %s)" % (name, getattr(coverage, "__version__", "?"),
                                            "the environment" if origin == "environment" else "ssrkit")
    _patch_unittest()
    atexit.register(_save)


def begin(test_id, path):
    _current[:] = [test_id, time.monotonic()]
    _arm(True)
    if _cov is not None:
        _cov.switch_context(test_id)
    if path:
        _files[test_id] = os.path.abspath(str(path))


def doctest(test_id):
    _doctests.add(test_id)


def broken(path, message):
    _broken[os.path.abspath(str(path))] = message


def end():
    _arm(False)
    if _cov is not None:
        _cov.switch_context("")
    test_id, started = _current
    if test_id is not None:
        now = time.monotonic()
        _durations[test_id] = _durations.get(test_id, 0.0) + (now - started)
        _current[:] = [None, 0.0]
        if now - _last_flush[0] >= FLUSH_SECONDS:
            _last_flush[0] = now
            _flush()


def over_budget(path):
    """True when the passing tests of test file `path` have taken longer than FILE_LIMIT (its next tests are
    to be skipped; the file is listed as cut)."""
    if FILE_LIMIT <= 0 or not path:
        return False
    path = os.path.abspath(str(path))
    if _file_seconds.get(path, 0.0) <= FILE_LIMIT:
        return False
    _files_cut.add(path)
    return True


def _account(test_id):
    """Add a passing test's duration to its file's (for FILE_LIMIT)."""
    path = _files.get(test_id)
    if FILE_LIMIT > 0 and path and _outcomes.get(test_id) == "passed":
        _file_seconds[path] = _file_seconds.get(path, 0.0) + _durations.get(test_id, 0.0)


def _flush():
    """Save what is known so far (the run may be cut at its timeout, without atexit)."""
    try:
        if _cov is not None:
            _cov.save()
        _save()
    except Exception:
        pass


def outcome(test_id, status):
    old = _outcomes.get(test_id)
    if old is None or RANK[status] > RANK[old]:
        _outcomes[test_id] = status


def _save():
    out = os.environ.get("SSRKIT_COV_DIR")
    if not out or not (_outcomes or _files or _broken):
        return
    path = os.path.join(out, "outcomes-%d.json" % os.getpid())
    with open(path + ".tmp", "w") as fh:
        json.dump({"outcomes": _outcomes, "files": _files, "doctests": sorted(_doctests), "broken": _broken,
                   "tracer": _tracer, "durations": _durations, "cut": sorted(_cut),
                   "files_cut": sorted(_files_cut)}, fh)
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
        if type(self).__name__ in ("DocTestCase", "DocFileCase"):
            doctest(test_id)
        path = getattr(module, "__file__", None)
        if over_budget(path):
            _files[test_id] = os.path.abspath(str(path))
            outcome(test_id, "skipped")
            result.startTest(self)
            result.addSkip(self, "ssrkit: its file's tests took longer than %gs under coverage" % FILE_LIMIT)
            result.stopTest(self)
            return result
        begin(test_id, path)
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
            _account(test_id)

    unittest.case.TestCase.run = run
