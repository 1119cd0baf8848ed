"""`ssrkit export`: artifacts as SWE-bench instances or SFT chat data (JSONL)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..artifact import find_artifacts
from ..errors import SsrkitError
from ..export import sft_examples, swebench_instance
from ..fsutil import atomic_write_text
from .common import ImageOpt, RepoOpt, WorkdirOpt, err_console, explicit_source

EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit export runs/offline/round-001/inject --format swebench > bugs.jsonl[/]
  [cyan]ssrkit export runs/offline --format sft --out sft.jsonl[/]
"""


def export(
    artifacts: List[Path] = typer.Argument(..., help="Artifact directories (or directories holding them).",
                                           show_default=False),
    fmt: str = typer.Option("swebench", "--format", "-f", help="swebench or sft."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write JSONL here instead of stdout."),
    repo: Optional[Path] = RepoOpt,
    image: Optional[str] = ImageOpt,
    workdir: Optional[str] = WorkdirOpt,
) -> None:
    """Export valid artifacts as SWE-bench-shaped instances, or successful solver trajectories for SFT."""
    if fmt not in ("swebench", "sft"):
        raise SsrkitError(f"unknown --format {fmt!r}: use swebench or sft")
    explicit = explicit_source(repo, image, workdir)
    lines: list[str] = []
    skipped = 0
    for art in find_artifacts(artifacts):
        if fmt == "swebench":
            if not (art.validation or {}).get("valid"):
                skipped += 1
                continue
            lines.append(json.dumps(swebench_instance(art, explicit)))
        else:
            lines.extend(json.dumps(ex) for ex in sft_examples(art))
    text = "".join(line + "\n" for line in lines)
    if out:
        atomic_write_text(out, text)
    else:
        sys.stdout.write(text)
    note = f", {skipped} invalid or unvalidated skipped" if skipped else ""
    err_console.print(f"exported {len(lines)} {fmt} record(s){note}")
