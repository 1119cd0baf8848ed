"""Moved to ssrkit.store.hf_checkpoint (#27); this alias keeps the old import path working until step 7.2."""
import sys; from ssrkit.store import hf_checkpoint as _moved; sys.modules[__name__] = _moved  # noqa
