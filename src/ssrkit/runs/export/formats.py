"""The export formats and how each is written: the JSONL formats to a file or stdout, the directory formats into
`--out`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Iterable

from ...store.fsutil import atomic_write_text
from .harbor import write_harbor_task
from .swebench import swebench_instance, write_swebench_repo
from .task import Task

FORMATS = ("swebench", "swebench-task", "harbor", "sft")



def write_jsonl(lines: list[str], out: Path | None) -> None:
    """`lines`, one a line, to `out` (replaced whole) or to stdout."""
    text = "".join(line + "\n" for line in lines)
    if out:
        atomic_write_text(out, text)
    else:
        sys.stdout.write(text)


def write(tasks: Iterable[Task], fmt: str, out: Path | None, *, dataset: str, base: str) -> None:
    """`tasks` in a task format: swebench (JSONL instances to `out` or stdout), swebench-task (a SWE-bench v5 task
    repository at `out`) or harbor (one task directory each under `out`)."""
    if fmt == "swebench":
        write_jsonl([json.dumps(swebench_instance(t, dataset)) for t in tasks], out)
    elif fmt == "swebench-task":
        assert out is not None
        write_swebench_repo(tasks, out, dataset=dataset, base=base)
    elif fmt == "harbor":
        assert out is not None
        for t in tasks:
            write_harbor_task(t, out, base=base)
    else:
        raise ValueError(f"not a task format: {fmt!r}")
