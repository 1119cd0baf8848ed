"""`ssrkit solve`: solver attempts on valid artifacts, each graded in a fresh sandbox."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, List, Optional

import typer
from rich.table import Table

from ..store.artifact import Artifact, find_artifacts
from ..store.attempts import attempt_records
from ..errors import SsrkitError
from ..executor import Shard
from ..solve import SolveOptions
from ..solve.repair import DEFAULT_BUDGET_RUNS
from ..solve.run import SolveBatch, SolveRequest, Watch
from ..solve.solvers import SOLVERS
from ..store.source import RepoSource
from ..store.trajectory import SUBMITTED
from .common import (ApiKeyEnvOpt, BackendOpt, BaseUrlOpt, ConfigOpt, ExecutorOpt, ImageOpt, JobsOpt, JsonOpt,
                     MaxTokensOpt, MaxTurnsOpt, ModelOpt, RayAddressOpt, RepoOpt, ShardOpt, TemperatureOpt, TimeoutOpt,
                     TokenIdsOpt, WorkdirOpt, console, err_console, load_batch, print_json, safe)
from .progress import progress

EPILOG = """
[bold]Examples[/]

  Check the grading on an artifact: the oracle (reverse of the bug) must pass, the empty patch must fail:
  [cyan]ssrkit solve art/3f2a9c1d --solver oracle --attempts 1[/]
  [cyan]ssrkit solve art/3f2a9c1d --solver null --attempts 2[/]      (adds attempt 002 next to 001)

  Eight LLM attempts per artifact (the GRPO group), four sandboxes at a time, against a vLLM server:
  [cyan]ssrkit solve runs/r1/artifacts/ --solver llm --base-url http://localhost:8000/v1 --model Qwen/Qwen2.5-Coder-32B-Instruct --jobs 4[/]

  Re-grade every saved fix.diff (e.g. after changing \\[solve] protected) without running any solver:
  [cyan]ssrkit solve runs/r1/artifacts/ --regrade --json | jq '[.[] | .passed]'[/]

  Grade a patch made by another tool or a person; it is kept as a new attempt (solver "external"):
  [cyan]git diff > /tmp/my.diff && ssrkit solve art/3f2a9c1d --patch /tmp/my.diff[/]

Re-running is idempotent: --attempts N makes sure each artifact has N finished attempts (a larger N adds only
the missing ones; --redo runs 001..N again). Each attempt is attempts/NNN/ with fix.diff, eval.json
(passed, reason, tests, exit_code, solver, …), test_output.log and, for llm, trajectory.json.
Only valid artifacts are solved: validate first (invalid ones in a directory are skipped with a note; a
directory with no valid artifact is nothing to do; one not validated, or changed since, stops the command
before any attempt, naming it). Exit code: 0; with --patch, 0 when the patch passes, 1
when it fails; 2 on usage or environment errors.
"""


def solve(
    artifacts: Annotated[List[Path], typer.Argument(
        help="Artifact directories (or directories holding them).", show_default=False,
    )],
    solver: Annotated[str, typer.Option(
        "--solver", help=f"Who solves: {', '.join(sorted(SOLVERS))}.",
    )] = "llm",
    attempts: Annotated[Optional[int], typer.Option(
        "--attempts", min=0,
        help=f"Finished attempts each artifact must have (default: \\[solve] attempts, else "
        f"{SolveOptions.attempts}).",
    )] = None,
    jobs: Annotated[Optional[int], JobsOpt] = None,
    executor: Annotated[Optional[str], ExecutorOpt] = None,
    ray_address: Annotated[Optional[str], RayAddressOpt] = None,
    shard: Annotated[Optional[str], ShardOpt] = None,
    redo: Annotated[bool, typer.Option("--redo", help="Run attempts 001..N again, replacing them.")] = False,
    regrade: Annotated[bool, typer.Option(
        "--regrade", help="Re-grade saved fix.diff files; run no solver.",
    )] = False,
    patch: Annotated[Optional[Path], typer.Option(
        "--patch", help="Grade this diff ('-' = stdin) as a new attempt.", show_default=False,
    )] = None,
    timeout: Annotated[Optional[float], TimeoutOpt] = None,
    base_url: Annotated[Optional[List[str]], BaseUrlOpt] = None,
    model: Annotated[Optional[str], ModelOpt] = None,
    api_key_env: Annotated[Optional[str], ApiKeyEnvOpt] = None,
    temperature: Annotated[Optional[float], TemperatureOpt] = None,
    max_turns: Annotated[Optional[int], MaxTurnsOpt] = None,
    max_tokens: Annotated[Optional[int], MaxTokensOpt] = None,
    token_ids: Annotated[bool, TokenIdsOpt] = True,
    budget_runs: Annotated[Optional[int], typer.Option(
        "--budget-runs", min=1,
        help=f"Test runs the repair solver may spend per attempt (default {DEFAULT_BUDGET_RUNS}).",
    )] = None,
    partial: Annotated[bool, typer.Option(
        "--partial",
        help="repair: when no candidate passes, submit the one that made the most failing "
        "tests pass without breaking others (failed attempts with code feed "
        "higher-order).",
    )] = False,
    seed: Annotated[int, typer.Option("--seed", help="Base seed (attempt k uses seed + k).")] = 0,
    repo: Annotated[Optional[Path], RepoOpt] = None,
    image: Annotated[Optional[str], ImageOpt] = None,
    workdir: Annotated[Optional[str], WorkdirOpt] = None,
    backend: Annotated[Optional[str], BackendOpt] = None,
    config: Annotated[Optional[Path], ConfigOpt] = None,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Run solver attempts on valid artifacts and grade each fix against the original tests.

    The solver's sandbox holds the original code with the bug and the weakened tests, its git history replaced by one fresh commit. Grading restores the listed test files and every protected file (test-like files, conftest.py, pytest.ini, pyproject.toml, …), runs test_script.sh and requires every FAIL_TO_PASS and PASS_TO_PASS test to pass and no test to fail; a passing fix is re-run with a canary test that must fail, to catch forged output.
    """
    if regrade and patch is not None:
        raise SsrkitError("give either --regrade or --patch, not both")
    items, cfg = load_batch(find_artifacts(artifacts), Shard.parse(shard), repo, image, workdir, config)
    named_one = len(artifacts) == 1 and len(items) == 1 and items[0][0].path.resolve() == artifacts[0].resolve()
    batch = SolveBatch(items, cfg, SolveRequest(
        solver, attempts=attempts, redo=redo, regrade=regrade, jobs=jobs, executor=executor,
        ray_address=ray_address, timeout=timeout, seed=seed, backend=backend, max_turns=max_turns,
        budget_runs=budget_runs, partial=partial,
        model=dict(base_url=base_url, model=model, api_key_env=api_key_env, temperature=temperature,
                   max_tokens=max_tokens, token_ids=token_ids)), strict=named_one or patch is not None)
    for note in batch.notes:
        err_console.print(f"[yellow]{safe(note)}[/]", highlight=False)
    if not batch.items:  # a batch of artifacts that are all invalid: nothing to do (the notes say why)
        if as_json:
            print_json([])
        else:
            console.print(f"nothing to solve: none of the {len(items)} artifact(s) is valid")
        return
    if patch is not None:
        _grade_patch(batch, patch, as_json)
    _render(batch.run(_watch(as_json)), as_json, batch.items)


def _grade_patch(batch: SolveBatch, patch: Path, as_json: bool) -> None:
    """`--patch`: grade one diff (a file, or `-` for stdin) as a new attempt; the exit code is its verdict."""
    if len(batch.items) != 1:
        raise SsrkitError(f"--patch grades one artifact; {len(batch.items)} given")
    text = sys.stdin.read() if str(patch) == "-" else _read_patch(patch)
    art, source = batch.items[0]
    record = batch.engine.add_external(art, source, text, origin="-" if str(patch) == "-" else str(patch))
    _render([record], as_json, batch.items)
    raise typer.Exit(0 if record["passed"] else 1)


def _read_patch(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        raise SsrkitError(f"--patch {path}: no such file")
    except IsADirectoryError:
        raise SsrkitError(f"--patch {path} is a directory; give a diff file")


def _watch(quiet: bool) -> Watch:
    """The attempts' progress on stderr (a bar, or log lines); none with --json."""

    @contextmanager
    def watch(label: str) -> Iterator[Callable[[dict[str, Any]], None] | None]:
        if quiet:
            yield None
            return
        with progress(label, None, err_console, err_console) as ticker:

            def done(record: dict[str, Any]) -> None:
                ticker.update(advance=1, description=f"{Path(record['artifact']).name}/{record['attempt']}")

            yield done

    return watch


def reason(record: dict[str, Any]) -> str:
    """Why an attempt failed, as the table shows it: where the solver submitted no fix, what the solver said
    (its note, its error or exit status) comes first: the tests failing as they did is then no news."""
    if record.get("passed") or record.get("fix_files"):
        return record.get("reason", "")
    info = record.get("solver_info") or {}
    status = info.get("exit_status")
    said = info.get("note") or info.get("error") or (status if status not in (None, SUBMITTED) else None)
    return f"no fix submitted: {said}" if said else "no fix submitted (an empty patch)"


def _render(records: list[dict[str, Any]], as_json: bool, items: list[tuple[Artifact, RepoSource]]) -> None:
    if as_json:
        print_json(records)
        return
    if records:
        table = Table(title="attempts graded", title_justify="left")
        table.add_column("artifact", overflow="fold")
        table.add_column("attempt")
        table.add_column("solver")
        table.add_column("verdict", no_wrap=True)
        table.add_column("reason", overflow="fold")
        table.add_column("time", justify="right")  # the solver's and the grading's
        for r in records:
            info = r.get("solver_info") or {}
            secs = float(r.get("seconds") or 0) + float(info.get("seconds") or 0)
            table.add_row(safe(Path(r["artifact"]).name), r["attempt"], safe(str(r["solver"])),
                          "[green]✔ solved[/]" if r["passed"] else "[red]✘ failed[/]", safe(reason(r)), f"{secs:.1f}s")
        console.print(table)
    else:
        console.print("nothing to do: every artifact already has as many attempts as asked (raise --attempts, "
                      "or --redo to grade them again)")
    for art, _ in items:
        recs = attempt_records(art)
        solved = sum(1 for r in recs if r.get("passed"))
        console.print(f"{safe(str(art.path))}: {solved}/{len(recs)} attempt(s) solved")
