"""`ssrkit inject`: write validated bug artifacts for a repository (procedural injector by default)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, List, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import SsrkitError
from ..inject.run import InjectRequest, Watch, run as run_injection
from ..inject.summary import InjectedArtifact, Injection, InjectReport
from .common import (ApiKeyEnvOpt, BackendOpt, BaseUrlOpt, ConfigOpt, ExecutorOpt, ImageOpt, JobsOpt, JsonOpt,
                     MaxTokensOpt, MaxTurnsOpt, ModelOpt, RayAddressOpt, ShardOpt, TemperatureOpt, TimeoutOpt,
                     TokenIdsOpt, WorkdirOpt, console, err_console, explicit_source, one_repo, print_json)
from .progress import Ticker, progress

EPILOG = """
[bold]Examples[/]

  20 bugs from a local repository, every strategy, 2 workers:
  [cyan]ssrkit inject build/repos/textkit --out runs/r1/artifacts --n 20 --jobs 2[/]

  Only expression mutations, another seed, machine-readable list of the artifacts:
  [cyan]ssrkit inject ~/src/mylib --out art/ --n 5 --strategy expression --seed 7 --json[/]

  Shard 2 of 3 of a round (a Slurm array task): its share of --n from its own candidates:
  [cyan]ssrkit inject build/repos/textkit --out runs/r1/artifacts --n 30 --shard 2/3[/]

  A repository inside a Docker image:
  [cyan]ssrkit inject --image myorg/mylib:env --workdir /testbed --out art/ --n 10[/]

Strategies share --n evenly: expression (comparison/arithmetic/boolean swaps, off-by-one, constants,
argument drops), removal (statements, branches, loops, early returns, function bodies), history (undo a past
fix's code hunks in today's files), combine (2–3 valid bugs of this run in different files). Each artifact is
validated before it is kept (out/<id>/validation.json). The same --seed gives the same artifacts; artifacts
already in --out from the same seed are reused; so are the valid ones of a run of that seed stopped early
(Ctrl-C, SIGTERM, a failure), kept in --out/.staging for the rerun. Per-repository test settings: the
\\[inject] section of the repository's ssrkit.toml (runner, python, args, test_command, exclude_tests).

Exit code: 0 when --n artifacts were written, 1 when fewer could be found, 2 on usage or environment errors.
"""

def inject(
    repo: Annotated[Optional[Path], typer.Argument(
        help="Local repository (a git working tree); or --repo PATH, or --image.", show_default=False,
    )] = None,
    out: Annotated[Path, typer.Option(
        "--out", "-o", help="Directory for the artifacts (out/<id>/).", show_default=False,
    )] = ...,
    n: Annotated[int, typer.Option("--n", "-n", min=1, help="Number of valid artifacts to write.")] = 10,
    jobs: Annotated[Optional[int], JobsOpt] = None,
    executor: Annotated[Optional[str], ExecutorOpt] = None,
    ray_address: Annotated[Optional[str], RayAddressOpt] = None,
    shard: Annotated[Optional[str], ShardOpt] = None,
    seed: Annotated[int, typer.Option(
        "--seed", help="Random seed: the same seed gives the same artifacts.",
    )] = 0,
    strategy: Annotated[Optional[str], typer.Option(
        "--strategy", "-s",
        help="procedural: comma-separated expression, removal, history, combine "
        "(default all); llm: a mixture of removal, history, direct, e.g. "
        "removal=0.5,history=0.5 (the default).",
    )] = None,
    agent: Annotated[str, typer.Option(
        "--agent", help="Injector: procedural (no model) or llm (an agent).",
    )] = "procedural",
    base_url: Annotated[Optional[List[str]], BaseUrlOpt] = None,
    model: Annotated[Optional[str], ModelOpt] = None,
    api_key_env: Annotated[Optional[str], ApiKeyEnvOpt] = None,
    temperature: Annotated[Optional[float], TemperatureOpt] = None,
    max_turns: Annotated[Optional[int], MaxTurnsOpt] = None,
    max_tokens: Annotated[Optional[int], MaxTokensOpt] = None,
    token_ids: Annotated[bool, TokenIdsOpt] = True,
    no_validate: Annotated[bool, typer.Option(
        "--no-validate", help="llm: keep injections without validating them.",
    )] = False,
    repo_opt: Annotated[Optional[Path], typer.Option(
        "--repo", help="Local repository (a git working tree): the same as the REPO argument.",
        rich_help_panel="Repository", show_default=False,
    )] = None,
    image: Annotated[Optional[str], ImageOpt] = None,
    workdir: Annotated[Optional[str], WorkdirOpt] = None,
    backend: Annotated[Optional[str], BackendOpt] = None,
    timeout: Annotated[Optional[float], TimeoutOpt] = None,
    max_tries: Annotated[Optional[int], typer.Option(
        "--max-tries", min=1, help="Candidates tried per strategy at most (default 20 per artifact + 20).",
    )] = None,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Re-map per-test coverage even if cached.")] = False,
    config: Annotated[Optional[Path], ConfigOpt] = None,
    as_json: Annotated[bool, JsonOpt] = False,
) -> None:
    """Inject bugs into a repository and keep the valid ones as artifacts.

    Maps which tests cover which functions (per-test coverage, cached), applies bug operators to covered code, pre-screens each candidate with the covering tests (fail-fast), removes the tests that fail to write test_weaken.diff, then validates every artifact like `ssrkit validate`.
    """
    repo = one_repo(repo, repo_opt, required=False)
    if (repo is None) == (image is None):
        raise SsrkitError("give a repository (a path, or --repo PATH) or --image NAME: exactly one")
    request = InjectRequest(
        explicit_source(repo, image, workdir), out, n=n, agent=agent, config=config, jobs=jobs, executor=executor,
        ray_address=ray_address, shard=shard, seed=seed, strategy=strategy, timeout=timeout, backend=backend,
        validate=not no_validate, max_tries=max_tries, cache=not no_cache, max_turns=max_turns,
        model=dict(base_url=base_url, model=model, api_key_env=api_key_env, temperature=temperature,
                   max_tokens=max_tokens, token_ids=token_ids))
    report, n = run_injection(request, _watch(agent, as_json))
    if as_json:  # stdout is the JSON list alone; notes (an interrupted run's kept work too) go to stderr
        for line in report.diagnosis:
            typer.echo(f"ssrkit inject: {line}", err=True)
        print_json([a.to_dict() for a in report.artifacts])
    elif agent == "llm":
        render_llm(report, out)
    else:
        render(report, n, out)
    raise typer.Exit(0 if report.written >= n else 1)


def _watch(agent: str, as_json: bool) -> Watch:
    """The progress of the injections: a bar or log lines (with --json: the notes alone, on stderr)."""

    @contextmanager
    def watch(label: str, n: int) -> Iterator[Callable[[Any], None] | None]:
        if as_json:
            yield _json_note if agent == "procedural" else None
            return
        with progress(label, n, console, err_console) as ticker:
            yield _llm_ticks(ticker) if agent == "llm" else _procedural_ticks(ticker, n)

    return watch


def _json_note(e: Any) -> None:
    if e.kind == "note":
        typer.echo(f"ssrkit inject: note: {e.message}", err=True)


def _procedural_ticks(ticker: Ticker, n: int) -> Callable[[Any], None]:
    counts = {"tried": 0, "valid": 0}

    def on_event(e: Any) -> None:
        if e.kind == "phase":
            ticker.update(description=e.message)
            return
        if e.kind == "note":
            ticker.note(e.message)
            return
        o = e.outcome
        counts["tried"] += 1
        counts["valid"] += bool(o and o.valid)
        ticker.update(completed=min(n, counts["valid"]),
                      description=f"{counts['tried']} tried, {counts['valid']} valid"
                                  + (f" — {o.candidate.strategy}: {o.status}" if o else ""))

    return on_event


def _llm_ticks(ticker: Ticker) -> Callable[[Injection], None]:
    def done(r: Injection) -> None:
        verdict = "valid" if r.valid else ("invalid" if r.id else r.exit_status)
        ticker.update(advance=1, description=f"{r.strategy}: {verdict}")

    return done


def render_llm(report: InjectReport, out: Path) -> None:
    table = Table(title=f"LLM injections in {escape(str(out))}", title_justify="left")
    for col in ("directory", "strategy", "exit status", "verdict"):
        table.add_column(col, overflow="fold")
    records = [r for r in report.artifacts if isinstance(r, Injection)]
    for r in records:
        verdict = "[green]valid[/]" if r.valid else ("[red]invalid[/]" if r.valid is False else
                                                     "[dim]not validated[/]" if r.id else
                                                     f"[red]no artifact[/] {escape(r.error or '')}")
        table.add_row(escape(Path(r.path).name) + (" [dim](reused)[/]" if r.reused else ""), r.strategy,
                      r.exit_status, verdict)
    console.print(table)
    valid = sum(1 for r in records if r.valid)
    console.print(f"{report.written}/{len(records)} injections produced an artifact, {valid} valid")


def render(report: InjectReport, n: int, out: Path) -> None:
    table = Table(title="candidates per strategy", title_justify="left")
    for col in ("strategy", "tried", "valid", "kept", "yield", "discarded (why)"):
        table.add_column(col, justify="left" if col in ("strategy", "discarded (why)") else "right")
    for name, st in report.stats.items():
        why = ", ".join(f"{k} {v}" for k, v in sorted(st.statuses.items()) if k not in ("valid", "reused"))
        table.add_row(name, str(st.tried), str(st.valid), str(st.kept), f"{st.to_dict()['yield']:.0%}", why)
    console.print(table)
    artifacts = [a for a in report.artifacts if isinstance(a, InjectedArtifact)]
    if artifacts:
        arts = Table(title=f"artifacts in {escape(str(out))}", title_justify="left")
        for col in ("id", "strategy", "operator", "target"):
            arts.add_column(col, overflow="fold")
        for a in artifacts:
            arts.add_row(a.id + (" [dim](reused)[/]" if a.reused else ""), a.strategy, a.operator, escape(a.target))
        console.print(arts)
    colour = "green" if len(artifacts) >= n else "yellow"
    console.print(f"[{colour} bold]{len(artifacts)}/{n}[/] valid artifact(s) written")
    for i, line in enumerate(report.diagnosis):
        console.print(("[yellow bold]why:[/] " if i == 0 else "     ") + escape(line))
