"""Errors a user can act on.

Anything raised as `SsrkitError` is a problem with input or environment, not a bug in ssrkit: the CLI prints
its message on one line and exits with code 2, never with a traceback.
"""


class SsrkitError(Exception):
    """A user-facing error: bad input, missing tool, unreachable service."""


class PatchError(SsrkitError):
    """A diff that does not parse, escapes the repository, or does not apply."""


class SandboxError(SsrkitError):
    """A sandbox could not be created or used (engine down, image missing, ...)."""
