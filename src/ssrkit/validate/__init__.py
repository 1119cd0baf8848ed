"""Consistency validation of bug artifacts (SPEC §2), split by job:

- `settings`: the `[validate]` section (thresholds, budgets, test patterns);
- `checks`: the check table, each check a small function over one artifact's context;
- `cache`: the original-run cache, shared by every artifact with the same repository state, script and parser;
- `engine`: the Validator (one artifact, every check) and validation.json (`Report`, `write_report`);
- `distribute`: many artifacts, `jobs` at a time or as units of an executor;
- `runslots`: the slots that bound test runs at once, and runs made ahead while a slot is idle.
"""

from .cache import OriginalRunCache, cache_dir
from .checks import CHECK_NAMES, CHECKS, EXECUTION_CHECKS, FAIL, PASS, SKIP, STATIC_CHECKS, WARN, Check
from .distribute import ValidatorSpec, cached_validator, validate_all, validate_unit
from .engine import KNOWN_RUNS, Report, Validator, previous_report, write_report
from .settings import Settings

__all__ = ["CHECKS", "CHECK_NAMES", "EXECUTION_CHECKS", "FAIL", "KNOWN_RUNS", "PASS", "SKIP", "STATIC_CHECKS", "WARN",
           "Check", "OriginalRunCache", "Report", "Settings", "Validator", "ValidatorSpec", "cache_dir",
           "cached_validator", "previous_report", "validate_all", "validate_unit", "write_report"]
