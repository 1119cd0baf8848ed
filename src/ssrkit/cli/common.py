"""Helpers shared by the CLI modules: options, config, sources, rendering."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.padding import Padding
from rich.text import Text
from typer.core import TyperCommand

from ..agents.client import Sampling
from ..agents.loop import AgentConfig
from ..store.artifact import Artifact
from ..store.config import Config, load_config
from ..errors import SsrkitError
from ..executor import Shard, shard_items
from ..store.source import DEFAULT_WORKDIR, RepoSource
from ..testrun import TEST_TIMEOUT
from ..text import MESSAGE_LIMIT, clip, printable, printable_json

#: the width of a console whose stream is no terminal (a file, a pipe, make's log): no line is wrapped below it
UNWRAPPED_WIDTH = 100_000


def console_width(stream: IO[str]) -> int | None:
    """Rich's own width on a terminal, or when $COLUMNS says one; else no wrapping at all. Rich falls back to
    80 columns where there is no terminal, which cut paths and messages in two under make and broke grep."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return None if tty or os.environ.get("COLUMNS") else UNWRAPPED_WIDTH


console = Console(width=console_width(sys.stdout))
err_console = Console(stderr=True, width=console_width(sys.stderr))


class Command(TyperCommand):
    """A command whose help epilogue keeps every example command on one line, whatever the width.

    Typer wraps the epilogue as one text, so a long example broke mid-command and prose written on several
    source lines broke raggedly. Here a line starting with `[cyan]` is an example command, printed whole
    (the terminal folds it, a copy gives it back entire); the other lines of a paragraph are prose, joined
    and wrapped to the width.
    """

    def format_help(self, ctx: Any, formatter: Any) -> None:
        epilog, self.epilog = self.epilog, None
        try:
            super().format_help(ctx, formatter)
        finally:
            self.epilog = epilog
        if epilog:
            from typer.rich_utils import MAX_WIDTH  # what the rest of the help is printed with ($TERMINAL_WIDTH)

            print_epilog(epilog, Console(width=MAX_WIDTH))


def epilog_blocks(epilog: str) -> list[tuple[str, int, str]]:
    """The epilogue as (kind, indent, markup) blocks: "command" (one line), "prose" (a paragraph's lines
    joined) or "blank"."""
    blocks: list[tuple[str, int, str]] = []
    for line in epilog.strip("\n").splitlines():
        text = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if not text:
            blocks.append(("blank", 0, ""))
        elif text.startswith("[cyan]"):
            blocks.append(("command", indent, text))
        elif blocks and blocks[-1][0] == "prose":
            kind, first, joined = blocks[-1]
            blocks[-1] = (kind, first, f"{joined} {text}")
        else:
            blocks.append(("prose", indent, text))
    return blocks


def print_epilog(epilog: str, out: Console) -> None:
    out.print()
    for kind, indent, markup in epilog_blocks(epilog):
        if kind == "blank":
            out.print()
        elif kind == "command":
            out.print(" " * (indent + 1) + markup, soft_wrap=True, highlight=False)
        else:
            out.print(Padding(Text.from_markup(markup), (0, 1, 0, indent + 1)), highlight=False)


# -- option declarations reused by several commands ------------------------------------------------
RepoOpt = typer.Option(
    "--repo", help="Local repository for artifacts without artifact.toml.", rich_help_panel="Repository",
)
ImageOpt = typer.Option(
    "--image", help="Docker image holding the repository (instead of a local one).", rich_help_panel="Repository",
)
WorkdirOpt = typer.Option(
    "--workdir", help=f"Repository root inside --image (default {DEFAULT_WORKDIR}).", rich_help_panel="Repository",
)
BackendOpt = typer.Option("--backend", help="Sandbox backend: auto, local or docker.", rich_help_panel="Sandbox")
ConfigOpt = typer.Option(
    "--config", "-c", help="ssrkit.toml to read (default ./ssrkit.toml).", rich_help_panel="Configuration",
)
JsonOpt = typer.Option("--json", help="Print machine-readable JSON on stdout instead of tables.")
JobsOpt = typer.Option("--jobs", "-j", min=1, help="Parallel runs.")
TimeoutOpt = typer.Option(
    "--timeout",
    help=f"Seconds per test run (default: \\[validate] timeout, else "
    f"{TEST_TIMEOUT:g}).",
)
ExecutorOpt = typer.Option(
    "--executor",
    help="Where units run: local (default) or ray (a Ray cluster; "
    "the ssrkit\\[ray] extra, docs/cluster.md).",
    rich_help_panel="Scale-out",
)
RayAddressOpt = typer.Option(
    "--ray-address",
    help="Ray cluster to join (default $RAY_ADDRESS, else a "
    "new one-node Ray here).",
    rich_help_panel="Scale-out",
)
ShardOpt = typer.Option(
    "--shard",
    help="Do only shard K of N (e.g. 2/4) of the units: N batch jobs "
    "split a round with no engine.",
    rich_help_panel="Scale-out",
)


def config_for(config: Optional[Path], repo: Optional[Path]) -> Config:
    return load_config(config, repo)


def one_repo(arg: Optional[Path], opt: Optional[Path], *, required: bool = True) -> Optional[Path]:
    """The repository of a command that takes it as an argument or as `--repo` (every command takes
    `--repo`; `inject` and `image build` also the bare path)."""
    if arg is not None and opt is not None and Path(arg).resolve() != Path(opt).resolve():
        raise SsrkitError(f"two repositories given ({arg} and --repo {opt}); give it once")
    path = opt if opt is not None else arg
    if path is None and required:
        raise SsrkitError("give a repository: a path, or --repo PATH")
    return path


def explicit_source(repo: Optional[Path], image: Optional[str], workdir: Optional[str]) -> RepoSource | None:
    if repo and image:
        raise SsrkitError("give either --repo or --image, not both")
    if repo:
        return RepoSource.local(repo)
    if image:
        return RepoSource.from_image(image, workdir or DEFAULT_WORKDIR)
    return None


def source_for(artifact: Artifact, explicit: RepoSource | None) -> RepoSource:
    """The flags win; otherwise the repository recorded in artifact.toml."""
    if explicit is not None:
        return explicit
    meta = artifact.metadata
    if meta.repo is None:
        raise SsrkitError(f"{artifact.path}: no repository recorded (no artifact.toml [repo]); "
                          f"pass --repo PATH or --image NAME")
    if meta.repo.kind == "local" and not Path(meta.repo.path).is_dir():
        raise SsrkitError(f"{artifact.path}: its repository {meta.repo.path} does not exist; pass --repo PATH")
    return meta.repo


def load_batch(found: list[Artifact], shard: Shard | None, repo: Optional[Path], image: Optional[str],
               workdir: Optional[str], config: Optional[Path]) -> tuple[list[tuple[Artifact, RepoSource]], Config]:
    """The artifacts a batch command works on: this `shard`'s of `found`, each with its repository (the flags',
    else the one its artifact.toml records), and the configuration (`config`, then the ssrkit.toml of the
    first artifact's repository when it is local)."""
    explicit = explicit_source(repo, image, workdir)
    items = [(a, source_for(a, explicit)) for a in shard_items(found, shard, lambda a: a.id)]
    first = items[0][1] if items else None
    return items, config_for(config, Path(first.path) if first is not None and first.kind == "local" else None)


def safe(text: Any) -> str:
    """Untrusted text for rich: control characters escaped (`printable`), markup escaped, length bounded."""
    return escape(printable(clip(str(text), MESSAGE_LIMIT)))


def print_json(obj: Any) -> None:
    # json escapes C0 controls; C1 controls and bidi overrides pass with ensure_ascii=False: escape them too
    sys.stdout.write(printable_json(json.dumps(obj, indent=2, ensure_ascii=False)) + "\n")
    sys.stdout.flush()


STATUS_STYLE = {
    "passed": "[green]✔ passed[/]",
    "failed": "[bold red]✘ failed[/]",
    "warning": "[yellow]! warning[/]",
    "skipped": "[dim]- skipped[/]",
}

# -- model options shared by the LLM injector and the LLM solver --------------------------------------
BaseUrlOpt = typer.Option(
    "--base-url",
    help="OpenAI-compatible endpoint, e.g. http://localhost:8000/v1 (llm); "
    "repeat it (or give a file of URLs) to spread trajectories over several servers.",
    rich_help_panel="Model",
)
ModelOpt = typer.Option("--model", help="Model name served there (llm).", rich_help_panel="Model")
ApiKeyEnvOpt = typer.Option(
    "--api-key-env", help="Variable holding the API key (default OPENAI_API_KEY).", rich_help_panel="Model",
)
TemperatureOpt = typer.Option("--temperature", help=f"Sampling temperature (default: \\[agent] temperature, else "
                              f"{Sampling.temperature:g}).", rich_help_panel="Model")
MaxTurnsOpt = typer.Option("--max-turns", min=1, help=f"Agent turns per run (default: \\[agent] max_turns, else "
                           f"{AgentConfig.max_turns}).", rich_help_panel="Model")
MaxTokensOpt = typer.Option("--max-tokens", min=1, help=f"Tokens per model reply (default: \\[agent] max_tokens, else "
                            f"{Sampling.max_tokens}).", rich_help_panel="Model")
TokenIdsOpt = typer.Option(
    "--token-ids/--no-token-ids",
    help="Ask the server for token ids and log-probs (vLLM returns them; others ignore it).", rich_help_panel="Model",
)
