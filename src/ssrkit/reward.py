"""Moved to ssrkit.verdict.rewards (#27); this alias keeps the old import path working until step 7.2."""
import sys; from ssrkit.verdict import rewards as _moved; sys.modules[__name__] = _moved  # noqa
