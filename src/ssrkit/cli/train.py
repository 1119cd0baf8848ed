"""`ssrkit train`: GRPO on the policy from the rollouts in artifact directories or rollout files (a thin CLI over
ssrkit.train).

    ssrkit train runs/r1/artifacts --model Qwen3-8B/ --out runs/r1/policy
    ssrkit train rollouts.jsonl --model Qwen3-8B/ --out runs/r1/policy     # rollouts from any source
    accelerate launch --config_file recipes/accelerate/ddp.yaml -m ssrkit.train runs/r1/artifacts --model ... --out ...

Every flag can also be set in the `[train]` section of ssrkit.toml (flags win); the resolved configuration is
written to OUT/train_config.toml. To try it without a GPU or a model download, make a tiny model first:
    python -c "from ssrkit.train.tiny import save_tiny_model; save_tiny_model('tiny-model')"
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..store.config import FieldHelp, settings_help
from ..train.config import TrainConfig

#: bool flags whose negative is not --no-NAME (kept for scripts written against earlier releases)
_SWITCHES = {"drop_zero_variance": "--drop-zero-variance/--keep-zero-variance"}


def _option(f: FieldHelp) -> inspect.Parameter:
    """One `TrainConfig` field as a flag: its type, its help and panel (the field's metadata), its default
    shown; None = not given, so `[train]` of ssrkit.toml applies."""
    default = f.default
    flag = "--" + f.name.replace("_", "-")
    if isinstance(default, bool):
        kind: Any = bool
        decls = [_SWITCHES.get(f.name, f"{flag}/--no-{flag[2:]}")]
    else:
        kind = str if isinstance(default, list) else type(default)
        decls = [flag]
    shown = ",".join(default) if isinstance(default, list) else ("on" if default else "off") if kind is bool else default
    text = f.help[:1].upper() + f.help[1:] if f.help else ""
    text += f" (default: {shown})" if shown not in ("", None) else ""
    if isinstance(default, list):
        text += "; comma-separated"
    opt = typer.Option(*decls, help=text.replace("[", "\\["), rich_help_panel=f.panel)
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=None,
                             annotation=Annotated[Optional[kind], opt])


def _command_options() -> list[inspect.Parameter]:
    """The options of `ssrkit train` that are not `TrainConfig` fields."""
    K = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter("artifacts", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=Annotated[
            Optional[list[Path]], typer.Argument(
                help="Artifact directories, folders holding them, or rollout files (*.jsonl: one rollout a line, "
                     "from any source; docs/train.md). None with --follow RUN.", show_default=False)]),
        inspect.Parameter("config", K, default=None, annotation=Annotated[Optional[Path], typer.Option(
            "--config", "-c", help="ssrkit.toml to read \\[train] from (default ./ssrkit.toml).",
            rich_help_panel="Configuration")]),
        inspect.Parameter("allow_empty", K, default=False, annotation=Annotated[bool, typer.Option(
            "--allow-empty", help="Nothing to train on (no rewarded trajectories, only zero-variance groups) is a "
            "no-op: exit 0 without writing a checkpoint (for recipes, whose next round then keeps the current "
            "policy).")]),
        inspect.Parameter("json_output", K, default=False, annotation=Annotated[bool, typer.Option(
            "--json", help="Print the run summary as JSON.")]),
        inspect.Parameter("verbose", K, default=False, annotation=Annotated[bool, typer.Option(
            "--verbose", "-v", help="Debug logging.")]),
    ]


def train(artifacts: Optional[list[Path]] = None, *, config: Optional[Path] = None, allow_empty: bool = False,
          json_output: bool = False, verbose: bool = False, **flags: Any) -> None:
    """Train the policy with GRPO on solver and injector rollouts (or any rollout file's); write a checkpoint `vllm
    serve` can load."""
    from ssrkit.train import TrainError, require_train_deps, resolve_config, run_follow, run_training
    from ssrkit.train.errors import NothingToTrain

    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, format="ssrkit.train: %(message)s", stream=sys.stderr
    )
    for noisy in ("httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        cfg = resolve_config(config, flags)
        if not cfg.model:
            raise TrainError("no model given: pass --model PATH (or set model in [train] of ssrkit.toml)")
        if cfg.follow:
            _follow(cfg, artifacts, json_output, run_follow)
            return
        if not artifacts:
            raise TrainError("no ARTIFACTS given: name artifact directories or rollout files to train on, or "
                             "--follow RUN to train on a run as it grows")
        if not cfg.out:
            raise TrainError("no output directory given: pass --out DIR (or set out in [train] of ssrkit.toml)")
        require_train_deps()
        summary = run_training(cfg, artifacts)
    except NothingToTrain as exc:
        if not allow_empty:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None
        if json_output:
            typer.echo(json.dumps({"out": cfg.out, "steps": 0, "empty": True, "reason": str(exc)}))
        else:
            typer.echo(f"nothing to train on, no checkpoint written (--allow-empty): {exc}")
        return
    except TrainError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not summary.pop("main_process", True):
        return  # under `accelerate launch`, rank 0 reports
    if json_output:
        typer.echo(json.dumps(summary))
    elif summary.get("skipped"):
        typer.echo(f"{summary['out']}: already trained ({summary['steps']} steps)")
    else:
        typer.echo(
            f"{summary['out']}: {summary['steps']} steps, {summary['rows']} rows, "
            f"{summary['tokens']} tokens, {summary['tokens_per_s']:.0f} tokens/s"
        )


def _follow(cfg: Any, artifacts: Optional[list[Path]], json_output: bool, run_follow: Any) -> None:
    """`--follow RUN`: checks, the one core call, the one line."""
    from ssrkit.train import TrainError

    if artifacts:
        raise TrainError("--follow RUN trains on the run's own groups: drop the ARTIFACTS arguments")
    if cfg.out:
        raise TrainError("--follow RUN writes its checkpoints to RUN/follow/checkpoints: drop --out")
    if cfg.epochs != 1:
        raise TrainError("--follow trains each rollout once: drop --epochs")
    summary = run_follow(cfg, Path(cfg.follow))
    if json_output:
        typer.echo(json.dumps(summary))
    else:
        typer.echo(f"following {summary['run']}: step {summary['step']} (policy {summary['policy_id']}), "
                   f"{summary['trained']} rollouts trained; {summary['stopped']}")


# Typer reads the command's options from its signature: one per TrainConfig field, made from the dataclass.
train.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [*_command_options()[:1], *(_option(f) for f in settings_help(TrainConfig).values()), *_command_options()[1:]]
)


def main(argv: list[str] | None = None) -> None:
    """`python -m ssrkit.train ARGS`: the same arguments as `ssrkit train`."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command()(train)
    app(args=argv, prog_name="ssrkit train")
