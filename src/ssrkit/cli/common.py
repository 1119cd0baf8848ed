"""Helpers shared by the CLI modules: options, config, sources, rendering."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from ..agents.client import Sampling
from ..agents.loop import AgentConfig
from ..artifact import Artifact
from ..config import Config, load_config
from ..errors import SsrkitError
from ..source import RepoSource
from ..testrun import TEST_TIMEOUT
from ..text import MESSAGE_LIMIT, clip, printable, printable_json

console = Console()
err_console = Console(stderr=True)

# -- option declarations reused by several commands ------------------------------------------------
RepoOpt = typer.Option(
    "--repo", help="Local repository for artifacts without artifact.toml.", rich_help_panel="Repository",
)
ImageOpt = typer.Option(
    "--image", help="Docker image holding the repository (instead of --repo).", rich_help_panel="Repository",
)
WorkdirOpt = typer.Option(
    "--workdir", help="Repository root inside --image (default /testbed).", rich_help_panel="Repository",
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


def explicit_source(repo: Optional[Path], image: Optional[str], workdir: Optional[str]) -> RepoSource | None:
    if repo and image:
        raise SsrkitError("give either --repo or --image, not both")
    if repo:
        return RepoSource.local(repo)
    if image:
        return RepoSource.from_image(image, workdir or "/testbed")
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
TemperatureOpt = typer.Option("--temperature", rich_help_panel="Model")
MaxTurnsOpt = typer.Option("--max-turns", min=1, help=f"Agent turns per run (default: \\[agent] max_turns, else "
                           f"{AgentConfig.max_turns}).", rich_help_panel="Model")
MaxTokensOpt = typer.Option("--max-tokens", min=1, help=f"Tokens per model reply (default: \\[agent] max_tokens, else "
                            f"{Sampling.max_tokens}).", rich_help_panel="Model")
TokenIdsOpt = typer.Option(
    "--token-ids/--no-token-ids",
    help="Ask the server for token ids and log-probs (vLLM returns them; others ignore it).", rich_help_panel="Model",
)
