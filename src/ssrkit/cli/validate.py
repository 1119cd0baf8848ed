"""`ssrkit validate`: run every consistency check on bug artifacts."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer
from rich.table import Table

from ..store.artifact import Artifact, find_artifacts
from ..executor import Shard, executor_from_config
from ..sandbox import backend_from_config, sandbox_options
from ..validate import Settings, Validator, validate_all
from .common import (STATUS_STYLE, BackendOpt, ConfigOpt, ExecutorOpt, ImageOpt, JobsOpt, JsonOpt, RayAddressOpt,
                     RepoOpt, ShardOpt, TimeoutOpt, WorkdirOpt, console, err_console, load_batch, print_json, safe)
from .progress import progress

EPILOG = """
[bold]Examples[/]

  Validate one hand-written artifact against a local repository:
  [cyan]ssrkit validate examples/artifacts/textkit/valid-slug-truncate-off-by-one --repo build/repos/textkit[/]

  Validate a whole directory of generated artifacts (their artifact.toml names the repository), 2 at a time:
  [cyan]ssrkit validate runs/r1/artifacts/ --jobs 2[/]

  On a Ray cluster (the ssrkit\\[ray] extra), or as shard 2 of 4 of a batch job array:
  [cyan]ssrkit validate runs/r1/artifacts/ --executor ray --ray-address auto[/]
  [cyan]ssrkit validate runs/r1/artifacts/ --shard 2/4[/]

  Stricter settings, machine-readable output:
  [cyan]ssrkit validate art/ --flaky-runs 2 --min-passing-tests 10 --total-break error --json | jq '.[].valid'[/]

Exit code: 0 when every artifact is valid, 1 when any is invalid, 2 on usage or environment errors.
Each artifact gets validation.json and logs/ (raw test logs of every run).
"""


def validate(
    artifacts: Annotated[List[Path], typer.Argument(
        help="Artifact directories (or directories holding them).", show_default=False,
    )],
    repo: Annotated[Optional[Path], RepoOpt] = None,
    image: Annotated[Optional[str], ImageOpt] = None,
    workdir: Annotated[Optional[str], WorkdirOpt] = None,
    backend: Annotated[Optional[str], BackendOpt] = None,
    jobs: Annotated[Optional[int], JobsOpt] = None,
    executor: Annotated[Optional[str], ExecutorOpt] = None,
    ray_address: Annotated[Optional[str], RayAddressOpt] = None,
    shard: Annotated[Optional[str], ShardOpt] = None,
    timeout: Annotated[Optional[float], TimeoutOpt] = None,
    flaky_runs: Annotated[Optional[int], typer.Option(
        "--flaky-runs", min=0, help="Repeat the original run K more times; reject changing statuses.",
    )] = None,
    min_passing_tests: Annotated[Optional[int], typer.Option(
        "--min-passing-tests", min=1, rich_help_panel="Thresholds",
        help=f"Tests that must pass on the original code (default: \\[validate], else {Settings.min_passing_tests}).",
    )] = None,
    min_failing_tests: Annotated[Optional[int], typer.Option(
        "--min-failing-tests", min=1, rich_help_panel="Thresholds",
        help=f"Tests the bug must break (default: \\[validate], else {Settings.min_failing_tests}).",
    )] = None,
    min_changed_files: Annotated[Optional[int], typer.Option(
        "--min-changed-files", min=1, rich_help_panel="Thresholds",
        help=f"Code files the bug must change (default: \\[validate], else {Settings.min_changed_files}).",
    )] = None,
    total_break: Annotated[Optional[str], typer.Option(
        "--total-break", help="A bug failing every test is a 'warning' or an 'error'.", rich_help_panel="Thresholds",
    )] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Re-run the original code even if cached.")] = False,
    redo: Annotated[bool, typer.Option(
        "--redo", help="Re-validate artifacts whose validation.json is up to date (same files, settings, "
        "repository and environment: variables, limits, virtualenv contents).",
    )] = False,
    details: Annotated[bool, typer.Option(
        "--details", help="One table per artifact, even for many artifacts.",
    )] = False,
    config: Annotated[Optional[Path], ConfigOpt] = None,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Check that bug artifacts are consistent: the bug breaks tests, the weakening hides it, every file counts.

    Static checks (files, diffs_parse, test_files_exist, weaken_scope, bug_scope, applies) run first; then the tests run in a sandbox (parser, original_passes, bug_breaks, weaken_hides, inverse_mutation). A check runs only if those it depends on passed, so the first failure is the one to fix.
    """
    items, cfg = load_batch(find_artifacts(artifacts), Shard.parse(shard), repo, image, workdir, config)
    settings = Settings.from_config(cfg, timeout=timeout, flaky_runs=flaky_runs, min_passing_tests=min_passing_tests,
                                    min_failing_tests=min_failing_tests, min_changed_files=min_changed_files,
                                    total_break=total_break, jobs=jobs, cache=False if no_cache else None)
    validator = Validator(settings, backend=backend_from_config(cfg, backend), options=sandbox_options(cfg))

    with executor_from_config(cfg, executor, ray_address, settings.jobs) as ex:
        results, reused = _validate(items, validator, redo or no_cache, as_json, ex)
    if as_json:
        print_json(results)
    else:
        # each artifact named as it was given, whether its verdict is new or read from validation.json
        shown = [{**r, "artifact": str(a.path)} for (a, _), r in zip(items, results)]
        if len(shown) == 1 or details:
            for r in shown:
                render_checks(r)
        else:
            render_summary(shown)
        if reused:
            when = f" (of {results[0].get('created', '?')})" if len(results) == 1 else ""
            console.print(f"[dim]{len(reused)} of {len(results)} verdict(s) read from validation.json{when}: up to "
                          f"date for these files, settings, source and environment; --redo validates again[/]")
    raise typer.Exit(0 if all(r["valid"] for r in results) else 1)


def _validate(items, validator: Validator, redo: bool, quiet: bool, ex) -> tuple[list[dict[str, Any]], list[str]]:
    """(the validation.json objects, the artifacts whose up-to-date validation.json was reused)."""
    reused: list[str] = []

    def note(art: Artifact, was_reused: bool) -> None:
        if was_reused:
            reused.append(art.name)

    if quiet or len(items) <= 1:
        results = validate_all(items, validator, redo=redo, executor=ex,
                               on_done=lambda art, _result, was: note(art, was))
        return results, reused
    with progress("validate", len(items), console, err_console) as ticker:

        def done(art: Artifact, result: dict[str, Any], was_reused: bool) -> None:
            note(art, was_reused)
            ticker.update(advance=1, description=art.name)

        return validate_all(items, validator, redo=redo, on_done=done, executor=ex), reused


def render_checks(result: dict[str, Any]) -> None:
    table = Table(title=f"[bold]{safe(result['artifact'])}[/]", title_justify="left", expand=False)
    table.add_column("check", style="bold")
    table.add_column("verdict", no_wrap=True)
    table.add_column("message", overflow="fold")
    table.add_column("time", justify="right", no_wrap=True)
    for c in result["checks"]:
        secs = f"{c['seconds']:.2f}s" if c["seconds"] else ""
        table.add_row(c["name"], STATUS_STYLE.get(c["status"], c["status"]), safe(c["message"]), secs)
    console.print(table)
    budget = result.get("budget") or {}
    if budget:  # before the verdict, which stays the last line
        console.print(f"[dim]test runs: {budget['used']:.1f}s of the artifact's {budget['seconds']:g}s budget[/]")
    if result["valid"]:
        console.print(f"[green bold]valid[/]  FAIL_TO_PASS: {len(result['fail_to_pass'])}  "
                      f"PASS_TO_PASS: {len(result['pass_to_pass'])}  ({result['seconds']:.1f}s)")
    else:
        first = next(c for c in result["checks"] if c["status"] == "failed")
        console.print(f"[red bold]invalid[/]: [bold]{first['name']}[/] — {safe(first['message'])}")


def _budget_line(results: list[dict[str, Any]]) -> str | None:
    """The budget of test runs one artifact may use, when the reports share one (they do in one command)."""
    budgets = {r["budget"]["seconds"] for r in results if r.get("budget")}
    if len(budgets) != 1:
        return None
    return f"[dim]each artifact's test runs may take {budgets.pop():g}s (\\[validate] budget)[/]"


def render_summary(results: list[dict[str, Any]]) -> None:
    table = Table(title="validation", title_justify="left")
    table.add_column("artifact", overflow="fold")
    table.add_column("verdict", no_wrap=True)
    table.add_column("first failing check / notes", overflow="fold")
    table.add_column("F2P", justify="right")
    table.add_column("time", justify="right")
    for r in results:
        first = next((c for c in r["checks"] if c["status"] == "failed"), None)
        note = f"[bold]{first['name']}[/]: {safe(first['message'])}" if first else ", ".join(r.get("warnings", []))
        table.add_row(safe(r["artifact"]), "[green]valid[/]" if r["valid"] else "[red]invalid[/]", note,
                      str(len(r["fail_to_pass"])), f"{r['seconds']:.1f}s")
    console.print(table)
    line = _budget_line(results)
    if line:
        console.print(line)
    n_valid = sum(r["valid"] for r in results)
    console.print(f"{n_valid}/{len(results)} valid")
