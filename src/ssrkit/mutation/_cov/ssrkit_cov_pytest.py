"""pytest plugin of ssrkit's per-test coverage (loaded through PYTEST_PLUGINS): context = node id."""

import os

import pytest

import ssrkit_cov


_root = None


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """pytest-cov (`--cov` in the repository's addopts) would start a second coverage and pause ssrkit's:
    the per-test run measures with ssrkit's alone."""
    ns = early_config.known_args_namespace
    if getattr(ns, "cov_source", None):
        ns.cov_source = None
        ns.no_cov = True


def pytest_configure(config):
    global _root
    ssrkit_cov.under_pytest = True
    _root = str(getattr(config, "rootpath", None) or getattr(config, "rootdir", "") or ".")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if type(item).__name__ == "DoctestItem":
        ssrkit_cov.doctest(item.nodeid)
    ssrkit_cov.begin(item.nodeid, getattr(item, "path", None) or getattr(item, "fspath", None))
    try:
        yield
    finally:
        ssrkit_cov.end()
        ssrkit_cov._account(item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A test file whose passing tests took longer than SSRKIT_COV_FILE_LIMIT: skip the rest of it."""
    if ssrkit_cov.over_budget(getattr(item, "path", None) or getattr(item, "fspath", None)):
        pytest.skip("ssrkit: its file's tests took longer than %gs under coverage" % ssrkit_cov.FILE_LIMIT)


def pytest_runtest_logreport(report):
    if report.failed:
        status = "failed" if report.when == "call" else "error"
    elif report.skipped:
        status = "passed" if hasattr(report, "wasxfail") else "skipped"
    elif report.when == "call":
        status = "passed"
    else:
        return
    ssrkit_cov.outcome(report.nodeid, status)


def pytest_collectreport(report):
    """A module that errors at collection (a missing dependency or submodule): remember its file."""
    if report.failed and report.nodeid:
        path = os.path.join(_root or ".", report.nodeid.split("::")[0])
        text = [ln for ln in str(getattr(report, "longrepr", "") or "").strip().splitlines() if ln.strip()]
        last = text[-1].strip() if text else "collection error"
        if last.startswith("E "):
            last = last[2:].strip()
        ssrkit_cov.broken(path, last[:200])
