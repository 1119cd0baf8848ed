"""Moved to ssrkit.mutation.coverage (#27); this alias keeps the old import path working until step 7.2."""
import sys; from ssrkit.mutation import coverage as _moved; sys.modules[__name__] = _moved  # noqa
