"""The one error type of `ssrkit.train`: a problem the user can act on (bad input, missing dependency)."""

from ..errors import SsrkitError


class TrainError(SsrkitError):
    """A user-facing training error. The CLI prints its message on one line and exits with code 2."""
