"""`ssrkit inject`: write validated bug artifacts for a repository (procedural injector by default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, List, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..errors import SsrkitError
from ..executor import Shard, executor_from_config
from ..fsutil import atomic_write_json
from ..agents.endpoints import client_from_config
from ..sandbox import SandboxOptions
from ..source import RepoSource
from .common import (ApiKeyEnvOpt, BackendOpt, BaseUrlOpt, ConfigOpt, ExecutorOpt, ImageOpt, JobsOpt, JsonOpt,
                     MaxTokensOpt, MaxTurnsOpt, ModelOpt, RayAddressOpt, ShardOpt, TemperatureOpt, TokenIdsOpt,
                     WorkdirOpt, config_for, console, print_json)

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
already in --out from the same seed are reused. Per-repository test settings: the \\[inject] section of the
repository's ssrkit.toml (runner, python, args, test_command, exclude_tests).

Exit code: 0 when --n artifacts were written, 1 when fewer could be found, 2 on usage or environment errors.
"""

#: --agent NAME -> runner(source, out, options) -> (artifact dicts, stats dict). The LLM injector registers
#: itself here when it is available (see `register_agent`).
AgentRunner = Callable[..., tuple[list[dict[str, Any]], dict[str, Any]]]
#: key of the stats dict holding what the run found out about the repository (tests, tracer, notes) and, when
#: it wrote nothing, its diagnosis (why, and the setting to change); written to inject.json as "run"
RUN = "run"
AGENTS: dict[str, AgentRunner] = {}


def register_agent(name: str, runner: AgentRunner) -> None:
    """Make `--agent NAME` available. `runner(source, out, n=, jobs=, seed=, strategies=, config=, backend=,
    options=, on_event=)` returns (list of artifact dicts as in `--json`, per-strategy stats)."""
    AGENTS[name] = runner


def _procedural(source: RepoSource, out: Path, **kw: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    from ..inject.procedural import inject

    result = inject(source, out, **kw)
    stats: dict[str, Any] = {k: v.to_dict() for k, v in result.stats.items()}
    stats[RUN] = {"runner": result.runner, "tests": result.n_tests, "tracer": result.tracer,
                  "seconds": round(result.seconds, 3), "coverage_seconds": round(result.coverage_seconds, 3),
                  "notes": result.notes, "diagnosis": result.diagnosis}
    return [a.to_dict() for a in result.artifacts], stats


register_agent("procedural", _procedural)


def inject(
    repo: Optional[Path] = typer.Argument(None, help="Local repository (a git working tree); or use --image.",
                                          show_default=False),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for the artifacts (out/<id>/).", show_default=False),
    n: int = typer.Option(10, "--n", "-n", min=1, help="Number of valid artifacts to write."),
    jobs: Optional[int] = JobsOpt,
    executor: Optional[str] = ExecutorOpt,
    ray_address: Optional[str] = RayAddressOpt,
    shard: Optional[str] = ShardOpt,
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed gives the same artifacts."),
    strategy: Optional[str] = typer.Option(None, "--strategy", "-s",
                                           help="procedural: comma-separated expression, removal, history, combine "
                                                "(default all); llm: a mixture of removal, history, direct, e.g. "
                                                "removal=0.5,history=0.5 (the default)."),
    agent: str = typer.Option("procedural", "--agent", help="Injector: procedural (no model) or llm (an agent)."),
    base_url: Optional[List[str]] = BaseUrlOpt,
    model: Optional[str] = ModelOpt,
    api_key_env: Optional[str] = ApiKeyEnvOpt,
    temperature: Optional[float] = TemperatureOpt,
    max_turns: Optional[int] = MaxTurnsOpt,
    max_tokens: Optional[int] = MaxTokensOpt,
    token_ids: bool = TokenIdsOpt,
    no_validate: bool = typer.Option(False, "--no-validate", help="llm: keep injections without validating them."),
    image: Optional[str] = ImageOpt,
    workdir: Optional[str] = WorkdirOpt,
    backend: Optional[str] = BackendOpt,
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Seconds per test run (default 90)."),
    max_tries: Optional[int] = typer.Option(None, "--max-tries", min=1,
                                            help="Candidates tried per strategy at most (default 20 per artifact + 20)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Re-map per-test coverage even if cached."),
    config: Optional[Path] = ConfigOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Inject bugs into a repository and keep the valid ones as artifacts.

    Maps which tests cover which functions (per-test coverage, cached), applies bug operators to covered code, pre-screens each candidate with the covering tests (fail-fast), removes the tests that fail to write test_weaken.diff, then validates every artifact like `ssrkit validate`.
    """
    if (repo is None) == (image is None):
        raise SsrkitError("give a repository path or --image NAME (exactly one)")
    source = RepoSource.local(repo) if repo is not None else RepoSource.from_image(image, workdir or "/testbed")
    if agent not in AGENTS and agent != "llm":
        known = ", ".join(sorted([*AGENTS, "llm"]))
        raise SsrkitError(f"--agent {agent!r} is not available (available: {known})")
    cfg = config_for(config, Path(source.path) if source.kind == "local" else None)
    cfg.override("validate", timeout=timeout)
    the_shard = Shard.parse(shard)
    if agent == "llm":
        if max_turns:
            cfg.override("agent", max_turns=max_turns)
        client = client_from_config(cfg, "inject", base_url=base_url, model=model, api_key_env=api_key_env,
                                    temperature=temperature, max_tokens=max_tokens, token_ids=token_ids)
        with executor_from_config(cfg, executor, ray_address, jobs or 1) as ex:
            _inject_llm(source, out, cfg, n=n, jobs=jobs or 1, seed=seed, strategy=strategy, backend=backend,
                        validate=not no_validate, as_json=as_json, client=client, executor=ex, shard=the_shard)
        return
    if (executor or cfg.get("run", "executor") or "local") != "local":
        raise SsrkitError(f"--agent {agent} keeps its coverage map and worker sandboxes on one machine; split "
                          "it with --shard K/N (one shard per node or batch job) instead of --executor ray, "
                          "which covers validate, solve, higher-order and inject --agent llm")
    from ..inject.procedural import Event, parse_strategies

    strategies = parse_strategies(strategy or "expression,removal,history,combine")
    kwargs: dict[str, Any] = dict(n=n, jobs=jobs or 1, seed=seed, strategies=strategies, config=cfg,
                                  backend=backend, options=SandboxOptions.from_config(cfg), cache=not no_cache)
    if agent == "procedural":
        kwargs["max_tries"] = max_tries
    if the_shard is not None:
        if agent != "procedural":
            raise SsrkitError(f"--shard is not supported by --agent {agent}")
        # shard K makes its share of --n from the candidates of its shard (disjoint from the others')
        n = kwargs["n"] = the_shard.share(n)
        kwargs["shard"] = the_shard
        if n < 1:
            raise SsrkitError(f"--n {n} split {the_shard.n} ways leaves shard {the_shard} nothing: raise --n")

    if as_json:
        artifacts, stats = AGENTS[agent](source, out, **kwargs)
        write_summary(out, artifacts, stats)
        for line in (stats.get(RUN) or {}).get("diagnosis") or []:
            typer.echo(f"ssrkit inject: {line}", err=True)
        print_json(artifacts)
        raise typer.Exit(0 if len(artifacts) >= n else 1)

    counts = {"tried": 0, "valid": 0}
    with Progress(TextColumn("[bold]inject"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as progress:
        task = progress.add_task("starting", total=n)

        def on_event(e: Event) -> None:
            if e.kind == "phase":
                progress.update(task, description=escape(e.message))
                return
            if e.kind == "note":
                progress.console.print(f"[dim]note:[/] {escape(e.message)}")
                return
            o = e.outcome
            counts["tried"] += 1
            counts["valid"] += bool(o and o.valid)
            progress.update(task, completed=min(n, counts["valid"]),
                            description=f"{counts['tried']} tried, {counts['valid']} valid"
                                        + (f" — {escape(o.candidate.strategy)}: {o.status}" if o else ""))

        artifacts, stats = AGENTS[agent](source, out, on_event=on_event, **kwargs)
    write_summary(out, artifacts, stats)
    render(artifacts, stats, n, out)
    raise typer.Exit(0 if len(artifacts) >= n else 1)


def _inject_llm(source: RepoSource, out: Path, cfg: Any, *, n: int, jobs: int, seed: int, strategy: Optional[str],
                backend: Optional[str], validate: bool, as_json: bool, client: Any, executor: Any,
                shard: Optional[Shard]) -> None:
    from ..inject.llm import inject_llm, parse_mixture

    mixture = parse_mixture(strategy)
    kwargs = dict(client=client, n=n, jobs=jobs, seed=seed, mixture=mixture, config=cfg, backend=backend,
                  options=SandboxOptions.from_config(cfg), validate=validate, executor=executor, shard=shard)
    if shard is not None:
        n = shard.share(n)
    if as_json:
        records, stats = inject_llm(source, out, **kwargs)
        write_summary(out, records, stats)
        print_json(records)
    else:
        with Progress(TextColumn("[bold]inject (llm)"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.description}"), console=console, transient=True) as progress:
            task = progress.add_task("", total=n)

            def done(r: dict[str, Any]) -> None:
                verdict = "valid" if r["valid"] else ("invalid" if r["id"] else r["exit_status"])
                progress.update(task, advance=1, description=f"{r['strategy']}: {verdict}")

            records, stats = inject_llm(source, out, on_done=done, **kwargs)
        write_summary(out, records, stats)
        render_llm(records, stats, out)
    kept = sum(1 for r in records if r["id"])
    raise typer.Exit(0 if kept >= n else 1)


def write_summary(out: Path, artifacts: list[dict[str, Any]], stats: dict[str, Any]) -> None:
    """out/inject.json: what this invocation tried per strategy (reports count discarded candidates from it),
    and what the run found out (tests, tracer, notes; the diagnosis of a run that wrote nothing)."""
    stats = dict(stats)
    run = stats.pop(RUN, None)
    data: dict[str, Any] = {"by_strategy": stats, "artifacts": artifacts}
    if run:
        data[RUN] = run
    atomic_write_json(Path(out) / "inject.json", data)


def render_llm(records: list[dict[str, Any]], stats: dict[str, Any], out: Path) -> None:
    table = Table(title=f"LLM injections in {escape(str(out))}", title_justify="left")
    for col in ("directory", "strategy", "exit status", "verdict"):
        table.add_column(col, overflow="fold")
    for r in records:
        verdict = "[green]valid[/]" if r["valid"] else ("[red]invalid[/]" if r["valid"] is False else
                                                         "[dim]not validated[/]" if r["id"] else
                                                         f"[red]no artifact[/] {escape(r['error'] or '')}")
        table.add_row(escape(Path(r["path"]).name) + (" [dim](reused)[/]" if r["reused"] else ""), r["strategy"],
                      r["exit_status"], verdict)
    console.print(table)
    valid = sum(1 for r in records if r["valid"])
    console.print(f"{sum(1 for r in records if r['id'])}/{len(records)} injections produced an artifact, {valid} valid")


def render(artifacts: list[dict[str, Any]], stats: dict[str, Any], n: int, out: Path) -> None:
    table = Table(title="candidates per strategy", title_justify="left")
    for col in ("strategy", "tried", "valid", "kept", "yield", "discarded (why)"):
        table.add_column(col, justify="left" if col in ("strategy", "discarded (why)") else "right")
    diagnosis = (stats.get(RUN) or {}).get("diagnosis") or []
    for name, st in stats.items():
        if name == RUN:
            continue
        why = ", ".join(f"{k} {v}" for k, v in sorted(st.get("statuses", {}).items()) if k not in ("valid", "reused"))
        table.add_row(name, str(st["tried"]), str(st["valid"]), str(st["kept"]), f"{st['yield']:.0%}", why)
    console.print(table)
    if artifacts:
        arts = Table(title=f"artifacts in {escape(str(out))}", title_justify="left")
        for col in ("id", "strategy", "operator", "target"):
            arts.add_column(col, overflow="fold")
        for a in artifacts:
            arts.add_row(a["id"] + (" [dim](reused)[/]" if a.get("reused") else ""), a["strategy"],
                         a["operator"], escape(a["target"]))
        console.print(arts)
    colour = "green" if len(artifacts) >= n else "yellow"
    console.print(f"[{colour} bold]{len(artifacts)}/{n}[/] valid artifact(s) written")
    for i, line in enumerate(diagnosis):
        console.print(("[yellow bold]why:[/] " if i == 0 else "     ") + escape(line))
