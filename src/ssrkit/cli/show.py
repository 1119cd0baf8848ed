"""`ssrkit show`: an artifact for a person — metadata, both diffs, the tests, the last verdicts."""

from __future__ import annotations

from pathlib import Path

from typing import Annotated

import typer
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table

from ..store.artifact import BUG_DIFF, METADATA, TEST_PARSER, TEST_SCRIPT, WEAKEN_DIFF, Artifact
from ..store.attempts import current_reward, scored_attempts
from ..text import printable
from .common import safe, STATUS_STYLE, console, print_json

EPILOG = """
[bold]Examples[/]

  [cyan]ssrkit show examples/artifacts/textkit/valid-slug-truncate-off-by-one[/]
  [cyan]ssrkit show runs/r1/artifacts/3f2a9c1d0b7e4a55 --no-diffs[/]
"""


def show(
    artifact: Annotated[Path, typer.Argument(help="An artifact directory.", show_default=False)],
    diffs: Annotated[bool, typer.Option("--diffs/--no-diffs", help="Show the two diffs.")] = True,
    script: Annotated[bool, typer.Option("--script", help="Also show test_script.sh and test_parser.py.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print metadata and verdicts as JSON.")] = False,
) -> None:
    """Print an artifact: metadata, the bug and weakening diffs (highlighted), test files, last verdicts."""
    art = Artifact(artifact)
    meta = art.metadata
    validation = art.validation
    reward = art.reward
    # a verdict or reward made from other files than the present ones is shown, marked stale
    current = {"validation": art.validation_if_current() is not None, "reward": current_reward(art) is not None}
    if as_json:
        print_json({"artifact": str(art.path), "metadata": meta.to_dict() if art.has_metadata else None,
                    "test_files": art.test_files, "validation": validation, "reward": reward,
                    "current": current, "attempts": [p.name for p in art.attempt_dirs()]})
        return

    _print_info(art)
    _print_files(art, diffs=diffs, script=script)
    _print_verdicts(art, validation, reward, current)


def _print_info(art: Artifact) -> None:
    """The metadata panel: id, repository, base commit, strategy, order, injector, test files."""
    meta = art.metadata
    info = Table.grid(padding=(0, 2))
    info.add_column(style="bold")
    info.add_column()
    info.add_row("id", art.id)
    if art.has_metadata:
        info.add_row("repository", safe(meta.repo.label) if meta.repo else "-")
        info.add_row("base commit", meta.base_commit or "-")
        info.add_row("strategy", meta.strategy)
        info.add_row("order", str(meta.order) + (f" (parent {meta.parent})" if meta.parent else ""))
        info.add_row("created", meta.created or "-")
        if meta.injector:
            info.add_row("injector", safe(", ".join(f"{k}={v}" for k, v in meta.injector.items())))
    else:
        info.add_row("metadata", f"[dim]no {METADATA} (hand-written: validate with --repo PATH)[/]")
    info.add_row("test files", safe("\n".join(art.test_files)) or "[red]none[/]")
    console.print(Panel(info, title=f"[bold]{safe(str(art.path))}[/]", title_align="left", expand=False))


def _print_files(art: Artifact, *, diffs: bool, script: bool) -> None:
    """The two diffs (highlighted) and, if asked, the test script and parser."""
    if diffs:
        for name, text in ((BUG_DIFF, art.bug_diff), (WEAKEN_DIFF, art.weaken_diff)):
            body = Syntax(printable(text), "diff", theme="ansi_dark", word_wrap=True) if text.strip() else "[red]missing or empty[/]"
            console.print(Panel(body, title=name, title_align="left", expand=False))
    if script:
        for name, text, lexer in ((TEST_SCRIPT, art.test_script, "bash"), (TEST_PARSER, art.test_parser, "python")):
            console.print(Panel(Syntax(printable(text), lexer, theme="ansi_dark"), title=name, title_align="left",
                                expand=False))  # as wide as its content: no 100,000-column box in a log


def _print_verdicts(art: Artifact, validation: dict | None, reward: dict | None, current: dict[str, bool]) -> None:
    """The last validation's checks, the attempts' count and the reward (each marked stale when made from other
    files than the present ones)."""
    if validation:
        table = Table(title=f"last validation: {'[green]valid[/]' if validation.get('valid') else '[red]invalid[/]'}"
                      f" ({validation.get('created', '?')})"
                      + ("" if current["validation"] else " [yellow]stale: made from other files[/]"),
                      title_justify="left")
        table.add_column("check", style="bold")
        table.add_column("verdict", no_wrap=True)
        table.add_column("message", overflow="fold")
        for c in validation.get("checks", []):
            table.add_row(c["name"], STATUS_STYLE.get(c["status"], c["status"]), safe(c["message"]))
        console.print(table)
        if validation.get("valid"):
            console.print(f"FAIL_TO_PASS ({len(validation['fail_to_pass'])}): "
                          + safe(", ".join(validation["fail_to_pass"][:10]))
                          + (" …" if len(validation["fail_to_pass"]) > 10 else ""))
    else:
        console.print("[dim]not validated yet: run `ssrkit validate` on it[/]")
    attempts = scored_attempts(art)
    if attempts:
        console.print(f"attempts: {len(attempts)}, solved: {sum(a.passed for a in attempts)}")
    if reward:
        console.print(f"reward: solve rate {reward.get('solve_rate')}, injector reward {reward.get('injector_reward')}"
                      + ("" if current["reward"] else " [yellow](stale: not of the present attempts; rerun ssrkit "
                                                      "reward)[/]"))
