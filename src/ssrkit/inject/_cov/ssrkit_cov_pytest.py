"""pytest plugin of ssrkit's per-test coverage (loaded through PYTEST_PLUGINS): context = node id."""

import pytest

import ssrkit_cov


def pytest_configure(config):
    ssrkit_cov.under_pytest = True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    ssrkit_cov.begin(item.nodeid, getattr(item, "path", None) or getattr(item, "fspath", None))
    try:
        yield
    finally:
        ssrkit_cov.end()


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
