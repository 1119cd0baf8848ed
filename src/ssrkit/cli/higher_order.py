"""`ssrkit higher-order`: failed solver attempts → new, order-2 artifacts (validated)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer
from rich.table import Table

from ..store.artifact import find_artifacts
from ..errors import SsrkitError
from ..executor import Shard, executor_from_config
from ..solve.grade import GradeSettings
from ..solve.higher_order import NO_CODE_CHANGE, check_out_dir, known_artifacts, make_all
from ..sandbox import backend_from_config, sandbox_options
from ..validate import Settings, Validator
from .common import (BackendOpt, ConfigOpt, ExecutorOpt, ImageOpt, JobsOpt, JsonOpt, RayAddressOpt, RepoOpt, ShardOpt,
                     WorkdirOpt, console, load_batch, print_json, safe)

EPILOG = """
[bold]Examples[/]

  Turn the failed attempts of a round into new artifacts, validated:
  [cyan]ssrkit higher-order runs/r1/artifacts/ --out runs/r1/higher/[/]
  [cyan]ssrkit solve runs/r1/higher/ --solver llm --base-url http://localhost:8000/v1 --model M[/]

  At most 4 per round, from the artifacts whose attempts failed most often (a re-run makes no more):
  [cyan]ssrkit higher-order runs/r1/artifacts/ --out runs/r1/higher/ --max 4[/]

  Round 2 of a run: not again what round 1 made from the same tasks' failures:
  [cyan]ssrkit higher-order runs/r2/artifacts/ runs/r2/tasks/ --out runs/r2/higher/ --known runs/r1/higher/[/]

  Only write them (validate later), JSON for scripts:
  [cyan]ssrkit higher-order art/3f2a9c1d --out /tmp/ho --no-validate --json | jq '.[] | select(.status=="created") | .path'[/]

Each new artifact is OUT/<id>/: its bug_inject.diff is the combined code diff (parent bug + the failed fix's
code hunks; its test-file hunks are dropped); test_weaken.diff, test_script.sh, test_files.txt and
test_parser.py are the parent's; artifact.toml has order = 2, parent and parent_attempt. Attempts that
passed, changed no code, do not apply or repeat an earlier combined diff (of this run, of --out or of --known)
are skipped. Order-2 artifacts make no further ones.
"""


def higher_order(
    artifacts: Annotated[List[Path], typer.Argument(
        help="Artifact directories whose attempts failed (or directories holding them).", show_default=False,
    )],
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Directory for the new artifacts.", show_default=False,
    )],
    validate: Annotated[bool, typer.Option(
        "--validate/--no-validate", help="Validate each new artifact (and any in --out not validated yet).",
    )] = True,
    max_new: Annotated[Optional[int], typer.Option(
        "--max", min=0,
        help="At most this many higher-order artifacts in --out (those already "
        "there count); the artifacts failed most often go first.",
    )] = None,
    known: Annotated[Optional[List[Path]], typer.Option(
        "--known", help="Artifacts made before (e.g. the higher-order folders of earlier rounds; repeatable): a "
        "combined diff already made into one of them is not made, validated or counted again.",
        show_default=False,
    )] = None,
    jobs: Annotated[Optional[int], JobsOpt] = None,
    executor: Annotated[Optional[str], ExecutorOpt] = None,
    ray_address: Annotated[Optional[str], RayAddressOpt] = None,
    shard: Annotated[Optional[str], ShardOpt] = None,
    repo: Annotated[Optional[Path], RepoOpt] = None,
    image: Annotated[Optional[str], ImageOpt] = None,
    workdir: Annotated[Optional[str], WorkdirOpt] = None,
    backend: Annotated[Optional[str], BackendOpt] = None,
    config: Annotated[Optional[Path], ConfigOpt] = None,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Make higher-order artifacts from failed attempts: original + bug + weaken + the failed fix."""
    the_shard = Shard.parse(shard)
    if the_shard is not None and max_new is not None:
        raise SsrkitError("--max ranks every parent artifact, so it cannot be split: drop --shard or --max")
    found = find_artifacts(artifacts)
    check_out_dir(out, found)
    made_before = known_artifacts(known or [], out)
    items, cfg = load_batch(found, the_shard, repo, image, workdir, config)
    be = backend_from_config(cfg, backend)
    options = sandbox_options(cfg)
    validator = Validator(Settings.from_config(cfg, jobs=jobs), backend=be, options=options)
    with executor_from_config(cfg, executor, ray_address, validator.settings.jobs) as ex:
        outcomes = make_all(items, out, settings=GradeSettings.from_config(cfg), max_new=max_new, executor=ex,
                            sandbox=(be, options), validator=validator if validate else None, known=made_before)
    results: list[dict[str, Any]] = [o.to_dict() for o in outcomes]
    if as_json:
        print_json(results)
        return
    console.print(_table(out, results))
    n_created = sum(1 for r in results if r["status"] == "created")
    n_valid = sum(1 for r in results if r.get("valid") and r["status"] == "created")
    console.print(f"{n_created} created" + (f", {n_valid} valid" if validate else ""))
    if not n_created and results and all(r.get("reason") == NO_CODE_CHANGE for r in results):
        console.print("[yellow]why:[/] no failed attempt changed code (a solver that gives up submits an empty "
                      "fix): solve with --partial (repair then submits its best partial fix) or with an LLM "
                      "solver, then run higher-order again")


def _table(out: Path, results: list[dict[str, Any]]) -> Table:
    """One row an attempt looked at: its parent, what came of it, the new artifact or why none."""
    table = Table(title=f"higher-order artifacts → {safe(str(out))}", title_justify="left")
    table.add_column("parent", overflow="fold")
    table.add_column("attempt")
    table.add_column("outcome")
    table.add_column("new artifact / reason", overflow="fold")
    for r in results:
        if r["status"] == "created":
            verdict = {True: " [green]valid[/]", False: " [red]invalid[/]", None: ""}[r.get("valid")]
            outcome = f"[bold]created[/]{verdict}"
            note = safe(r["path"]) + (f"\n{safe(r['invalid_because'])}" if r.get("invalid_because") else "")
        else:
            outcome = "[dim]" + r["status"] + "[/]"
            note = safe(r["reason"])
        table.add_row(safe(Path(r["parent"]).name), r["attempt"], outcome, note)
    return table
