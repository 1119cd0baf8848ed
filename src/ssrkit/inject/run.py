"""One entry for both injectors: what `ssrkit inject` asks, checked and carried out (`run`).

The procedural and the LLM injector take different knobs (strategies or a mixture; a model client), and a
shard makes its share of `--n`; all of that is decided here, once, so that a caller other than the command
line (a recipe driver, a test) gets the same checks and the same artifacts. The caller keeps the showing:
`watch` is told when the work starts and how much of it there is, and gives back what to call per step.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

from ..errors import SsrkitError
from ..executor import Shard, executor_from_config
from ..store.config import Config, load_config
from ..store.source import RepoSource, require_git_toplevel
from .summary import InjectReport

#: the injectors `--agent` chooses from
AGENTS = ("procedural", "llm")
#: the procedural strategies when none are named
PROCEDURAL_STRATEGIES = "expression,removal,history,combine"

#: `watch(label, total)`: entered when the injections start (`total` of them in this shard), it yields what to
#: call per step (procedural: each `Event`; llm: each `Injection`), or None
Watch = Callable[[str, int], ContextManager[Callable[[Any], None] | None]]


@dataclass
class InjectRequest:
    """What to inject, as `ssrkit inject`'s flags say it; None: the configuration's, else the default."""

    source: RepoSource
    out: Path
    n: int = 10
    agent: str = "procedural"
    config: Path | None = None  # the ssrkit.toml to read (the repository's own is read too)
    jobs: int | None = None
    executor: str | None = None
    ray_address: str | None = None
    shard: str | None = None  # "K/N"
    seed: int = 0
    strategy: str | None = None  # procedural: strategies, "a,b"; llm: a mixture, "a=0.7,b=0.3"
    timeout: float | None = None  # seconds per test run
    backend: str | None = None
    validate: bool = True  # llm: validate each injection
    max_tries: int | None = None  # procedural
    cache: bool = True  # procedural: reuse the coverage map
    max_turns: int | None = None  # llm
    model: dict[str, Any] = field(default_factory=dict)  # llm: `client_from_config`'s flags (base_url, model, ...)


@contextmanager
def unwatched(label: str, total: int) -> Iterator[None]:
    yield None


def run(request: InjectRequest, watch: Watch = unwatched) -> tuple[InjectReport, int]:
    """Check `request`, run its injector, and return (the report, the number of artifacts this shard was to
    write): fewer written than that is a shortfall."""
    r = request
    if r.source.kind == "local":
        require_git_toplevel(Path(r.source.path), "repository", "inject works on the top of a git work tree (to "
                             "make one of a plain directory: git init && git add -A && git commit -m base)")
    if r.out.exists() and not r.out.is_dir():
        raise SsrkitError(f"--out {r.out} is a file; give a directory (it is made if missing)")
    if r.agent not in AGENTS:
        raise SsrkitError(f"--agent {r.agent!r} is not available (available: {', '.join(sorted(AGENTS))})")
    cfg = load_config(r.config, Path(r.source.path) if r.source.kind == "local" else None)
    cfg.override("validate", timeout=r.timeout)
    shard = Shard.parse(r.shard)
    if r.agent == "llm":
        return _llm(r, cfg, shard, watch)
    return _procedural(r, cfg, shard, watch)


def _procedural(r: InjectRequest, cfg: Config, shard: Shard | None, watch: Watch) -> tuple[InjectReport, int]:
    from ..sandbox import sandbox_options
    from .procedural import inject, parse_strategies

    strategies = parse_strategies(r.strategy or PROCEDURAL_STRATEGIES)
    options = sandbox_options(cfg)
    n = r.n
    if shard is not None:  # shard K makes its share of --n from the candidates of its shard (disjoint from others')
        n = shard.share(r.n)
        if n < 1:
            raise SsrkitError(f"--n {r.n} split {shard.n} ways leaves shard {shard} nothing: raise --n")
    with executor_from_config(cfg, r.executor, r.ray_address, r.jobs or 1) as ex, watch("inject", n) as on_event:
        report = inject(r.source, r.out, n=n, jobs=r.jobs or 1, seed=r.seed, strategies=strategies, config=cfg,
                        backend=r.backend, options=options, cache=r.cache, max_tries=r.max_tries, shard=shard,
                        executor=ex, on_event=on_event)
    return report, n


def _llm(r: InjectRequest, cfg: Config, shard: Shard | None, watch: Watch) -> tuple[InjectReport, int]:
    from ..agents.endpoints import client_from_config
    from ..sandbox import sandbox_options
    from .llm import inject_llm, parse_mixture

    if r.max_turns:
        cfg.override("agent", max_turns=r.max_turns)
    client = client_from_config(cfg, "inject", **r.model)
    with executor_from_config(cfg, r.executor, r.ray_address, r.jobs or 1) as ex:
        mixture = parse_mixture(r.strategy)
        options = sandbox_options(cfg)
        n = shard.share(r.n) if shard is not None else r.n  # inject_llm picks this shard's injections of --n
        with watch("inject (llm)", n) as on_done:
            report = inject_llm(r.source, r.out, client=client, n=r.n, jobs=r.jobs or 1, seed=r.seed,
                                mixture=mixture, config=cfg, backend=r.backend, options=options,
                                validate=r.validate, executor=ex, shard=shard, on_done=on_done)
    return report, n
