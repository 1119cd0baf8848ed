"""Moved to ssrkit.serving (#27); this alias keeps the old import path working until step 7.2."""
import sys; from ssrkit import serving as _moved; sys.modules[__name__] = _moved  # noqa
