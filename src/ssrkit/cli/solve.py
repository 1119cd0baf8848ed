"""`ssrkit solve`: solver attempts on valid artifacts, each graded in a fresh sandbox."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer
from rich.table import Table

from ..agents.endpoints import client_from_config
from ..agents.loop import AgentConfig
from ..store.artifact import Artifact, find_artifacts
from ..store.attempts import attempt_records
from ..errors import SsrkitError
from ..executor import Shard, executor_from_config, shard_items
from ..solve import Engine, SolveOptions, solvable
from ..solve.repair import DEFAULT_BUDGET_RUNS
from ..solve.solvers import SOLVERS, make_solver
from ..store.source import RepoSource
from ..store.trajectory import SUBMITTED
from .common import (ApiKeyEnvOpt, BackendOpt, BaseUrlOpt, ConfigOpt, ExecutorOpt, ImageOpt, JobsOpt, JsonOpt,
                     MaxTokensOpt, MaxTurnsOpt, ModelOpt, RayAddressOpt, RepoOpt, ShardOpt, TemperatureOpt, TimeoutOpt,
                     TokenIdsOpt, WorkdirOpt, config_for, console, err_console, explicit_source, print_json, safe,
                     source_for)
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
    found = shard_items(find_artifacts(artifacts), Shard.parse(shard), lambda a: a.id)
    explicit = explicit_source(repo, image, workdir)
    items = [(a, source_for(a, explicit)) for a in found]
    first = items[0][1] if items else None
    cfg = config_for(config, Path(first.path) if first is not None and first.kind == "local" else None)
    options = SolveOptions.from_config(cfg, backend=backend, jobs=jobs, timeout=timeout, seed=seed, attempts=attempts)
    engine = Engine(options)
    named_one = len(artifacts) == 1 and len(found) == 1 and found[0].path.resolve() == artifacts[0].resolve()
    items, notes = solvable(items, strict=named_one or patch is not None)
    for note in notes:
        err_console.print(f"[yellow]{safe(note)}[/]", highlight=False)
    if not items:  # a batch of artifacts that are all invalid: nothing to do (the notes say why)
        if as_json:
            print_json([])
        else:
            console.print(f"nothing to solve: none of the {len(found)} artifact(s) is valid")
        return

    if patch is not None:
        _grade_patch(engine, items, patch, as_json)

    the_solver = None
    if not regrade:
        client = None
        if solver == "llm":
            client = client_from_config(cfg, "solve", base_url=base_url, model=model, api_key_env=api_key_env,
                                        temperature=temperature, max_tokens=max_tokens, token_ids=token_ids)
        the_solver = make_solver(solver, client=client, budget_runs=budget_runs, partial=partial,
                                 agent=AgentConfig.from_config(cfg, max_turns=max_turns))
    with executor_from_config(cfg, executor, ray_address, options.jobs) as ex:
        if the_solver is None:
            records = _with_progress(lambda cb: engine.regrade(items, on_done=cb, executor=ex), "regrade", as_json)
        else:
            records = _with_progress(lambda cb: engine.solve(items, the_solver, redo=redo, on_done=cb,
                                                             executor=ex), f"solve ({solver})", as_json)
    _render(records, as_json, items)


def _grade_patch(engine: Engine, items: list, patch: Path, as_json: bool) -> None:
    """`--patch`: grade one diff (a file, or `-` for stdin) as a new attempt; the exit code is its verdict."""
    if len(items) != 1:
        raise SsrkitError(f"--patch grades one artifact; {len(items)} given")
    text = sys.stdin.read() if str(patch) == "-" else _read_patch(patch)
    art, source = items[0]
    record = engine.add_external(art, source, text, origin="-" if str(patch) == "-" else str(patch))
    _render([record], as_json, items)
    raise typer.Exit(0 if record["passed"] else 1)

def _read_patch(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8", "replace")
    except FileNotFoundError:
        raise SsrkitError(f"--patch {path}: no such file")
    except IsADirectoryError:
        raise SsrkitError(f"--patch {path} is a directory; give a diff file")


def _with_progress(run, label: str, quiet: bool) -> list[dict[str, Any]]:
    if quiet:
        return run(None)
    with progress(label, None, err_console, err_console) as ticker:

        def done(record: dict[str, Any]) -> None:
            ticker.update(advance=1, description=f"{Path(record['artifact']).name}/{record['attempt']}")

        return run(done)


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
