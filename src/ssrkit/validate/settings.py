"""The `[validate]` settings: thresholds, budgets and the test patterns, checked once when read."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from ..store.config import Config, load_settings, setting
from ..errors import SsrkitError
from ..verdict.patterns import DEFAULT_TEST_PATTERNS
from ..testrun import PARSER_TIMEOUT, TEST_TIMEOUT


@dataclass
class Settings:
    """Thresholds and budgets (the `[validate]` config section)."""

    SECTION: ClassVar[str] = "validate"

    timeout: float = setting(TEST_TIMEOUT, help="seconds per test run (a repository's profile may set it)")
    min_passing_tests: int = setting(5, help="tests the original code must pass")
    min_failing_tests: int = setting(1, help="tests the bug must break")
    min_changed_files: int = setting(1, help="source files the bug must change")
    total_break: str = setting("warning", help='a bug that breaks every test: "warning" or "error"')
    flaky_runs: int = setting(0, help="extra runs of the original code to find flaky tests")
    jobs: int = setting(1, help="artifacts validated at once")
    test_patterns: list[str] = setting(factory=lambda: list(DEFAULT_TEST_PATTERNS),
                                       help="what counts as a test file (a profile's patterns are added)")
    cache: bool = setting(True, help="reuse the original code's test runs across artifacts of one commit")
    parser_timeout: float = setting(PARSER_TIMEOUT, help="seconds a parse of one log may take (counted from "
                                                         "the end of the tests)")
    budget: float = setting(0.0, help="seconds of test runs (parses included, waits for a run slot not) one "
                                      "artifact may use; 0: four runs at their full budgets")

    @classmethod
    def from_config(cls, cfg: Config, **flags: Any) -> "Settings":
        """`[validate]` of the resolved configuration, then `flags` (None = not given), checked."""
        return cls.check(load_settings(cls, cfg, **flags))

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> "Settings":
        """A `[validate]` table alone (tests, callers holding one)."""
        return cls.from_config(Config({"validate": dict(section)}))

    @staticmethod
    def check(s: "Settings") -> "Settings":
        if s.total_break not in ("warning", "error"):
            raise SsrkitError(f"validate.total_break must be 'warning' or 'error', not {s.total_break!r}")
        if s.timeout <= 0:
            raise SsrkitError("the test timeout must be positive")
        if s.parser_timeout <= 0:
            raise SsrkitError("validate.parser_timeout must be positive")
        if s.budget < 0:
            raise SsrkitError("validate.budget must be 0 (as many runs as the checks need, each at its full "
                              "timeout) or a positive number of seconds")
        if s.jobs < 1:
            raise SsrkitError("--jobs must be at least 1")
        return s

    def thresholds(self) -> dict[str, int]:
        """The three numbers an injection must meet, as the LLM injector's prompt states them and its
        trajectory records them (`min_passing_tests`, `min_failing_tests`, `min_changed_files`)."""
        return {"min_passing_tests": self.min_passing_tests, "min_failing_tests": self.min_failing_tests,
                "min_changed_files": self.min_changed_files}

    @property
    def wall_budget(self) -> float:
        """`budget`, or by default what the checks' runs take when each takes its whole time (the original,
        bug, bug+weaken and one inverse-mutation run, and the flaky runs): a hostile artifact costs this much
        of a run slot and no more."""
        if self.budget:
            return self.budget
        return (4 + self.flaky_runs) * (self.timeout + self.parser_timeout)

    def key(self) -> str:
        d = asdict(self)
        d.pop("jobs")
        d.pop("cache")
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
