"""The LLM injector as a batch: N agent runs in parallel sandboxes, each validated (SPEC §4).

Unlike the procedural injector, every finished injection is kept, valid or not: the injector's reward is −1
for an invalid artifact, and training needs those rollouts too. Injection i of a seed always lands in the
same directory (`llm-s<seed>-<i>`), so a re-run skips finished ones; one that was killed mid-way is moved
aside (`….interrupted`, its trajectory kept) and run again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..agents import AgentConfig, ModelClient
from ..agents.injector import DEFAULT_MIXTURE, Thresholds, choose_strategy
from ..agents.prompts import STRATEGIES
from ..artifact import METADATA, TRAJECTORY, VALIDATION, Artifact
from ..config import Config
from ..errors import SsrkitError
from ..executor import ArtifactRef, write_tree
from ..fsutil import read_json
from ..sandbox import SandboxOptions
from ..source import RepoSource, head_commit
from ..validate import Settings, Validator

if TYPE_CHECKING:
    from ..executor import Executor, Shard


def parse_mixture(text: str | None) -> dict[str, float]:
    """'removal,history' (equal weights) or 'removal=0.7,direct=0.3' → weights; default 50/50 removal/history."""
    if not text:
        return dict(DEFAULT_MIXTURE)
    out: dict[str, float] = {}
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        name, _, weight = item.partition("=")
        name = name.strip().lower()
        if name not in STRATEGIES:
            raise SsrkitError(f"unknown LLM injection strategy {name!r}; choose from {', '.join(STRATEGIES)}")
        try:
            out[name] = float(weight) if weight else 1.0
        except ValueError:
            raise SsrkitError(f"strategy weight {weight!r} is not a number (e.g. removal=0.7)") from None
        if out[name] < 0:
            raise SsrkitError("strategy weights must be non-negative")
    if not out or sum(out.values()) <= 0:
        raise SsrkitError("the strategy mixture has no positive weight")
    return out


@dataclass
class LLMStats:
    tried: int = 0
    valid: int = 0
    kept: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"tried": self.tried, "valid": self.valid, "kept": self.kept,
                "yield": round(self.valid / self.tried, 4) if self.tried else 0.0, "statuses": self.statuses}


def _finished(d: Path) -> bool:
    """A directory whose injection ended (artifact written, or trajectory closed without one)."""
    if (d / METADATA).is_file():
        return True
    t = d / TRAJECTORY
    if not t.is_file():
        return False
    try:
        return read_json(t).get("exit_status") not in (None, "running")
    except (OSError, ValueError):
        return False


def _set_aside(d: Path) -> None:
    k = 1
    while d.with_name(f"{d.name}.interrupted-{k}").exists():
        k += 1
    d.rename(d.with_name(f"{d.name}.interrupted-{k}"))


def inject_llm(
    source: RepoSource,
    out: Path,
    *,
    client: ModelClient,
    n: int,
    jobs: int = 1,
    seed: int = 0,
    mixture: dict[str, float] | None = None,
    config: Config,
    backend: str | None = None,
    options: SandboxOptions | None = None,
    validate: bool = True,
    on_done: Callable[[dict[str, Any]], None] | None = None,
    executor: "Executor | None" = None,
    shard: "Shard | None" = None,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Run `n` LLM injections into `out/`; returns (one dict per injection, per-strategy stats).

    Each injection (and its validation) is a unit of `executor` (default: the local pool of `jobs`); with
    `shard` K/N only the injections i with i mod N = K−1 run, so N shards together make the same n."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    mixture = mixture or dict(DEFAULT_MIXTURE)
    settings = Settings.from_section(config.section("validate"))
    thresholds = Thresholds(settings.min_passing_tests, settings.min_failing_tests, settings.min_changed_files)
    agent_cfg = AgentConfig.from_dict(config.section("agent"))
    backend = backend or config.get("sandbox", "backend", "auto")
    validator = Validator(settings, backend=backend, options=options)
    base_commit = head_commit(source.path) if source.kind == "local" else None
    exclude_tests = [str(t) for t in (config.get("inject", "exclude_tests") or [])]  # the repository's profile
    stats: dict[str, LLMStats] = {}
    from ..executor import LocalExecutor, run_units
    from ..units import LLMInjection, ValidatorSpec, llm_injection_unit

    ex = executor or LocalExecutor(max(1, min(jobs, n)))
    indices = [i for i in range(n) if shard is None or shard.owns_index(i)]
    env = LLMInjection(source=ex.source_ref(source), client=client, mixture=mixture, thresholds=thresholds,
                       agent=agent_cfg, base_commit=base_commit, timeout=settings.timeout,
                       exclude_tests=exclude_tests, backend=backend, options=options,
                       validator=(ValidatorSpec(settings, backend, options or SandboxOptions()) if ex.portable
                                  else validator) if validate else None)
    args = []
    for i in indices:
        d = out / f"llm-s{seed}-{i:03d}"
        rng = random.Random(f"{seed}-{i}")
        strategy = choose_strategy(mixture, rng)
        reused = _finished(d)
        if not reused and d.exists():
            _set_aside(d)
        ref = ex.artifact_ref(d) if reused else ArtifactRef(str(d), {} if ex.portable else None)
        args.append((env, ref, strategy, rng.randrange(2**31), reused))

    def done(k: int, out_: tuple[str, str | None, dict[str, bytes] | None]) -> None:
        status, error, files = out_
        d = Path(args[k][1].origin)
        if files is not None:
            write_tree(d, files, last=(METADATA, VALIDATION))
        strategy, reused = args[k][2], args[k][4]
        valid = None
        art_id = None
        if (d / METADATA).is_file():
            art = Artifact(d)
            strategy = art.metadata.strategy
            art_id = art.id
            if validate:
                valid = bool((art.validation or {}).get("valid"))
        record = {"id": art_id, "path": str(d), "strategy": strategy, "exit_status": status, "error": error,
                  "valid": valid, "reused": reused}
        st = stats.setdefault(strategy, LLMStats())
        st.tried += 1
        st.kept += art_id is not None
        st.valid += bool(valid)
        key = "valid" if valid else ("invalid" if art_id else status)
        st.statuses[key] = st.statuses.get(key, 0) + 1
        if on_done:
            on_done(record)
        records[k] = record

    records: dict[int, dict[str, Any]] = {}
    try:
        run_units(ex, llm_injection_unit, args, done)
    finally:
        if executor is None:
            ex.close()
    records = [records[k] for k in range(len(args))]  # type: ignore[assignment]
    return records, {k: v.to_dict() for k, v in sorted(stats.items())}
