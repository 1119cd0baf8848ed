"""Diffs applied in a sandbox with `git apply`: several chained in front of one command (`Applies`), and the
PatchError that names the diff, file and hunk git would not apply. An `Applies` is made by `Sandbox.applies`
(sandbox/base.py, which imports this module: the annotations name `Sandbox` without importing it)."""

from __future__ import annotations

import secrets
import shlex
from typing import Sequence

from ..errors import PatchError
from ..patch import explain_apply_error


class Applies:
    """`git apply` of several diffs chained in front of a command: the applies' output goes to a scratch
    file and is printed, after a random tag line naming the diff, only when one fails (the command then does
    not run), so a command's output is its own; `check` turns a failure into PatchError naming the diff."""

    def __init__(self, sandbox: Sandbox, diffs: Sequence[tuple[str, str]], *, stem: str = "ssrkit-apply",
                 checks: Sequence[tuple[str, str]] = ()) -> None:
        todo = [(label, diff, False) for label, diff in diffs if diff.strip()]
        todo += [(label, diff, True) for label, diff in checks if diff.strip()]
        self.labels = [label for label, _, _ in todo]
        self.tag = f"ssrkit-apply-failed-{secrets.token_hex(8)}"
        err = shlex.quote(sandbox.scratch_path(f"{stem}.err"))
        self.steps = [f"{sandbox.patch_command(diff, f'{stem}-{i}.diff', check=check)} >{err} 2>&1 || "
                      f"{{ echo {self.tag}:{i}; cat {err}; exit 1; }}" for i, (_, diff, check) in enumerate(todo)]

    def command(self, then: str) -> str:
        return "; ".join([*self.steps, then])

    def failure(self, output: str) -> tuple[str, str] | None:
        """(label, what git said) of the diff that failed, when `output` (of `command`) says one did."""
        if self.steps and output.startswith(self.tag + ":"):
            head, _, rest = output.partition("\n")
            return self.labels[int(head.rsplit(":", 1)[1])], rest
        return None

    def check(self, output: str) -> None:
        """Raise PatchError (naming the diff, file and hunk) when `output` says an apply failed."""
        failed = self.failure(output)
        if failed is not None:
            raise patch_error(*failed)


def patch_error(label: str, said: str) -> PatchError:
    """The PatchError for the diff `label` that git would not apply (`said`: git's words); `.label` names it."""
    err = PatchError(explain_apply_error(said, label))
    err.label = label  # type: ignore[attr-defined]
    return err
