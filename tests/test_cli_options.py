"""One option style across the commands, help that keeps example commands whole, output that is not cut at 80
columns when it goes to a file (issue 31, item 5)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer
from typer.core import TyperGroup, TyperOption
from rich.text import Text
from typer.testing import CliRunner

from fixtures.paths import ROOT
from ssrkit.cli.common import epilog_blocks
from ssrkit.cli.main import app

#: commands whose work is about one repository: each takes --repo (some also take it as their argument)
REPO_COMMANDS = ("inject", "validate", "solve", "higher-order", "export", "image build")


def commands() -> dict:
    """Every leaf command by its full name ("validate", "pool select")."""
    out: dict = {}

    def walk(cmd, prefix: str) -> None:
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                walk(sub, f"{prefix} {name}".strip())
        else:
            out[prefix] = cmd

    walk(typer.main.get_command(app), "")
    return out


@pytest.mark.fast
def test_a_short_flag_means_the_same_option_in_every_command():
    meaning: dict[str, set[str]] = {}
    where: dict[str, list[str]] = {}
    for name, cmd in commands().items():
        for p in cmd.params:
            if not isinstance(p, TyperOption):
                continue
            longs = [o for o in p.opts if o.startswith("--")]
            for short in (o for o in p.opts if re.fullmatch(r"-[A-Za-z]", o)):
                meaning.setdefault(short, set()).update(longs)
                where.setdefault(short, []).append(f"{name} {'/'.join(longs)}")
    clashes = {s: where[s] for s, longs in meaning.items() if len(longs) > 1}
    assert not clashes, f"a short flag with two meanings: {clashes}"
    assert meaning["-n"] == {"--n"} and meaning["-s"] == {"--strategy"} and meaning["-c"] == {"--config"}


@pytest.mark.fast
def test_every_command_about_a_repository_takes_repo():
    cmds = commands()
    for name in REPO_COMMANDS:
        opts = {o for p in cmds[name].params for o in p.opts}
        assert "--repo" in opts, f"ssrkit {name} has no --repo"


@pytest.mark.fast
def test_inject_takes_the_repository_as_repo_too(tmp_path):
    runner = CliRunner()
    res = runner.invoke(app, ["inject", "--repo", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")])
    assert "No such option" not in res.output
    res = runner.invoke(app, ["inject", str(tmp_path / "a"), "--repo", str(tmp_path / "b"), "--out", str(tmp_path)])
    assert "two repositories given" in str(res.exception)


@pytest.mark.fast
def test_no_help_text_loses_a_bracket_to_rich_markup():
    """`[default: ...]` unescaped is a Rich tag: `image build --tag` showed "Image name ."."""
    for name, cmd in commands().items():
        for p in cmd.params:
            text = getattr(p, "help", None) or ""
            assert Text.from_markup(text).plain == text.replace("\\[", "["), f"{name} {p.opts}: {text!r}"


@pytest.mark.fast
def test_no_help_panel_is_named_examples():
    """`train --help` had a panel titled "Examples" holding --max-length."""
    for name, cmd in commands().items():
        panels = {getattr(p, "rich_help_panel", None) for p in cmd.params}
        assert "Examples" not in panels, name


@pytest.mark.fast
@pytest.mark.parametrize("width", [60, 200])
def test_help_epilogues_keep_each_example_command_on_one_line(width):
    runner = CliRunner()
    checked = 0
    for name, cmd in commands().items():
        if not cmd.epilog:
            continue
        res = runner.invoke(app, [*name.split(), "--help"], env={"COLUMNS": str(width), "TERMINAL_WIDTH": None})
        assert res.exit_code == 0, res.output
        lines = res.output.splitlines()
        for kind, _, markup in epilog_blocks(cmd.epilog):
            plain = Text.from_markup(markup).plain
            if kind == "command":
                assert any(line.strip() == plain.strip() for line in lines), (name, plain)
                checked += 1
            elif kind == "prose" and width == 200:  # prose is rewrapped to the width, not to the source's lines
                assert " ".join(plain.split()) in " ".join(res.output.split()), (name, plain[:60])
    assert checked >= 20


def test_output_to_a_file_is_not_wrapped_at_80_columns(tmp_path):
    """Under make (stdout and stderr are no terminal) a path longer than 80 columns stays on one line."""
    deep = tmp_path / ("a-directory-name-long-enough-to-need-more-than-eighty-columns-" * 2) / "run"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "ssrkit", "report", str(deep)], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert proc.returncode == 2
    assert f"{deep}: no such run directory" in proc.stderr.splitlines()[0]
    art = tmp_path / ("an-artifact-with-a-name-long-enough-to-need-more-than-eighty-columns-" * 2)
    art.symlink_to(ROOT / "examples" / "artifacts" / "textkit" / "invalid-files")
    proc = subprocess.run([sys.executable, "-m", "ssrkit", "show", str(art), "--no-diffs"], capture_output=True,
                          text=True, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert any(str(art) in line for line in proc.stdout.splitlines()), proc.stdout
    assert max(map(len, proc.stdout.splitlines())) < 400  # and nothing is padded to the unwrapped width


def test_every_recipe_variable_is_in_selfplay_help_and_the_readme():
    """`make selfplay-help` and recipes/README.md's table name every variable recipes/selfplay.mk reads."""
    mk = (ROOT / "recipes" / "selfplay.mk").read_text()
    variables = set(re.findall(r"^([A-Z][A-Z_]*) \?=", mk, flags=re.M))
    assert {"EXECUTOR", "RAY_ADDRESS", "SERVE_STRATEGY", "INJECT_ARGS"} <= variables
    shown = subprocess.run(["make", "--no-print-directory", "-f", "recipes/selfplay.mk", "help"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    listed = {line.split()[0] for line in shown.splitlines() if line.startswith("  ") and line.split()}
    assert variables <= listed, f"missing from `make selfplay-help`: {sorted(variables - listed)}"
    readme = (ROOT / "recipes" / "README.md").read_text()
    table = readme[readme.index("## Variables"):readme.index("\n## ", readme.index("## Variables") + 1)]
    in_table = set(re.findall(r"`([A-Z][A-Z_]*)`", table))
    assert variables <= in_table, f"missing from recipes/README.md: {sorted(variables - in_table)}"
