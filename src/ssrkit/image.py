"""Moved to ssrkit.sandbox.image (#27); this alias keeps the old import path working until step 7.2."""
import sys; from ssrkit.sandbox import image as _moved; sys.modules[__name__] = _moved  # noqa
