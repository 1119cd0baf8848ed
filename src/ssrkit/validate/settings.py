"""The `[validate]` settings: thresholds, budgets and the test patterns, checked once when read."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..store.config import Config
from ..errors import SsrkitError
from ..verdict.patterns import DEFAULT_TEST_PATTERNS
from ..testrun import PARSER_TIMEOUT, TEST_TIMEOUT


@dataclass
class Settings:
    """Thresholds and budgets (the `[validate]` config section)."""

    timeout: float = TEST_TIMEOUT
    min_passing_tests: int = 5
    min_failing_tests: int = 1
    min_changed_files: int = 1
    total_break: str = "warning"  # "warning" or "error"
    flaky_runs: int = 0
    jobs: int = 1
    test_patterns: list[str] = field(default_factory=lambda: list(DEFAULT_TEST_PATTERNS))
    cache: bool = True
    #: seconds a parse of one log may take (counted from the end of the tests)
    parser_timeout: float = PARSER_TIMEOUT
    #: seconds of test runs (parses included, waits for a run slot not) one artifact may use; 0: `wall_budget`'s default
    budget: float = 0.0

    @classmethod
    def from_config(cls, cfg: Config, **flags: Any) -> "Settings":
        """`[validate]` of the resolved configuration, then `flags` (None = not given)."""
        return cls.from_section(cfg.override("validate", **flags).section("validate"))

    @classmethod
    def from_section(cls, section: dict[str, Any]) -> "Settings":
        known = {f for f in cls.__dataclass_fields__}
        s = cls(**{k: v for k, v in section.items() if k in known})
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
