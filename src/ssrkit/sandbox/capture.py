"""A command's output as the backends keep it: bounded captures (`OutputCapture`, `truncate_middle`, verdict's
own, since exported graders keep output the same way), the exit code of a command that timed out, the text of
its bytes."""

from __future__ import annotations

from ..verdict.output import OutputCapture, truncate_middle  # noqa: F401 - the backends keep output with these

TIMEOUT_EXIT_CODE = 124


def decode_output(data: bytes) -> str:
    """Command output as text: UTF-8, undecodable bytes replaced."""
    return data.decode("utf-8", errors="replace")
