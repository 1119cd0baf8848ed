"""The SPEC §6 verdict on one graded test run: every FAIL_TO_PASS and PASS_TO_PASS test present and passed, no
test failed or errored, no timeout, a log that parses, and an exit code that agrees with the log."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .statuses import ERROR, FAILED, PASSED, TestRun

@dataclass
class Expectations:
    """What grading needs from validation.json."""

    fail_to_pass: list[str]
    pass_to_pass: list[str]

    @property
    def required(self) -> list[str]:
        return [*self.fail_to_pass, *self.pass_to_pass]


def _short(items: list[str], n: int = 3) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def judge(run: TestRun, expect: Expectations) -> tuple[bool, str, dict[str, Any]]:
    """The SPEC §6 verdict on one grading run: (passed, reason, details)."""
    statuses = run.statuses
    required = expect.required
    missing = [t for t in required if t not in statuses]
    not_passed = {t: statuses[t] for t in required if t in statuses and statuses[t] != PASSED}
    failed = sorted(t for t, s in statuses.items() if s in (FAILED, ERROR))
    details = {"missing": missing, "not_passed": not_passed, "failed": failed}
    if run.timed_out:
        return False, f"the tests did not finish within the time budget ({run.seconds:.0f}s)", details
    if run.parse_error and not statuses:
        return False, f"the test log could not be parsed: {run.parse_error}", details
    f2p = set(expect.fail_to_pass)
    f2p_bad = [t for t in expect.fail_to_pass if t in missing or t in not_passed]
    if f2p_bad:
        how = ", ".join(f"{t} ({not_passed.get(t, 'absent')})" for t in f2p_bad[:3])
        more = f" and {len(f2p_bad) - 3} more" if len(f2p_bad) > 3 else ""
        return False, (f"{len(f2p_bad)} of {len(f2p)} FAIL_TO_PASS test(s) do not pass: {how}{more}"), details
    p2p_bad = [t for t in expect.pass_to_pass if t in missing or t in not_passed]
    if p2p_bad:
        how = ", ".join(f"{t} ({not_passed.get(t, 'absent')})" for t in p2p_bad[:3])
        more = f" and {len(p2p_bad) - 3} more" if len(p2p_bad) > 3 else ""
        return False, f"{len(p2p_bad)} PASS_TO_PASS test(s) broken by the fix: {how}{more}", details
    if failed:
        return False, f"{len(failed)} other test(s) failed: {_short(failed)}", details
    if run.exit_code != 0:
        return False, (f"tampering: the test script exited with code {run.exit_code} but the parsed log shows no "
                       f"failed test"), details
    return True, f"all {len(required)} required test(s) pass ({len(f2p)} FAIL_TO_PASS)", details
