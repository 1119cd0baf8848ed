"""`ssrkit export`: artifacts as SWE-bench instances (JSONL) or task repositories, Harbor tasks, or SFT data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..runs import export as core
from ..store.artifact import find_artifacts
from ..errors import SsrkitError
from ..sandbox.image import BASE_IMAGE
from .common import ConfigOpt, ImageOpt, RepoOpt, WorkdirOpt, err_console, explicit_source, source_for

EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit export runs/offline/round-001/inject --format swebench > bugs.jsonl[/]
  [cyan]ssrkit export runs/offline/round-001/inject --format swebench-task --out tasks/[/]   (then: swebench eval tasks/ --gold --task-repo tasks/)
  [cyan]ssrkit export runs/offline/round-001/inject --format harbor --out harbor/[/]   (then: harbor run -p harbor/<task> ...)
  [cyan]ssrkit export runs/offline --format sft --out sft.jsonl[/]

See docs/export.md.
"""

DIR_FORMATS = ("swebench-task", "harbor")


def export(
    artifacts: Annotated[List[Path], typer.Argument(
        help="Artifact directories (or directories holding them).", show_default=False,
    )],
    fmt: Annotated[str, typer.Option(
        "--format", "-f",
        help="swebench (JSONL), swebench-task (a SWE-bench v5 task repository), harbor "
        "(Harbor task directories) or sft (JSONL).",
    )] = "swebench",
    out: Annotated[Optional[Path], typer.Option(
        "--out", "-o",
        help="JSONL formats: write here instead of stdout. swebench-task and "
        "harbor: the directory to write (required).",
    )] = None,
    base: Annotated[str, typer.Option(
        "--base",
        help="swebench-task / harbor: the image the task Dockerfiles build on (any image "
        "with git, python3 and the repository's test dependencies).",
    )] = BASE_IMAGE,
    dataset: Annotated[str, typer.Option(
        "--dataset", help="swebench / swebench-task: the dataset name the tasks belong to.",
    )] = core.DEFAULT_DATASET,
    repo: Annotated[Optional[Path], RepoOpt] = None,
    image: Annotated[Optional[str], ImageOpt] = None,
    workdir: Annotated[Optional[str], WorkdirOpt] = None,
    config: Annotated[Optional[Path], ConfigOpt] = None,
) -> None:
    """Export valid artifacts for SWE-bench or Harbor, or successful solver trajectories for SFT."""
    if fmt not in core.FORMATS:
        raise SsrkitError(f"unknown --format {fmt!r}: use {', '.join(core.FORMATS)}")
    if fmt in DIR_FORMATS and out is None:
        raise SsrkitError(f"--format {fmt} writes a directory: give it with --out DIR")
    if fmt in DIR_FORMATS and out.exists() and not out.is_dir():
        raise SsrkitError(f"--out {out} exists and is not a directory")
    explicit = explicit_source(repo, image, workdir)
    found = find_artifacts(artifacts)
    if not found:
        raise SsrkitError(f"no artifacts found in {', '.join(map(str, artifacts))}")
    if fmt == "sft":
        lines = [json.dumps(ex) for art in found for ex in core.sft_examples(art)]
        core.write_jsonl(lines, out)
        err_console.print(f"exported {len(lines)} sft record(s)")
        return
    tasks, skipped = core.make_tasks(found, lambda art: source_for(art, explicit), config)
    note = f", {skipped} invalid or unvalidated skipped" if skipped else ""
    if fmt != "swebench" and not tasks:
        raise SsrkitError(f"no valid artifact to export{note}; validate them first (ssrkit validate)")
    core.write(tasks, fmt, out, dataset=dataset, base=base)
    if fmt == "swebench":
        err_console.print(f"exported {len(tasks)} swebench record(s){note}")
    elif fmt == "swebench-task":
        err_console.print(f"exported {len(tasks)} task(s) to the SWE-bench task repository {out}{note}; "
                          f"evaluate with: swebench eval {out} --gold --task-repo {out}")
    else:
        err_console.print(f"exported {len(tasks)} Harbor task(s) to {out}{note}")
