"""`ssrkit inject` on the command line: --json lists the artifacts; bad flags are usage errors (exit 2)."""

from __future__ import annotations

import json

import pytest

import ssrkit.inject.procedural as procedural
from ssrkit.cli.main import main

from conftest import local_sandbox


@pytest.fixture
def local_backend_sandbox(monkeypatch):
    monkeypatch.setattr(procedural, "open_sandbox", lambda source, backend, options: local_sandbox(source))


def run_cli(args, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return exc.value.code, out, err


def test_inject_json(units_repo, tmp_path, local_backend_sandbox, capsys):
    code, out, _ = run_cli(["inject", str(units_repo), "--out", str(tmp_path), "--n", "1",
                            "--strategy", "expression", "--seed", "5", "--json"], capsys)
    assert code == 0
    listed = json.loads(out)
    assert len(listed) == 1 and listed[0]["strategy"] == "expression"
    assert (tmp_path / listed[0]["id"] / "validation.json").is_file()
    assert (tmp_path / "inject-config.toml").is_file()


@pytest.mark.parametrize("args,message", [
    (["--strategy", "typo"], "unknown strategy"),
    (["--agent", "llm"], "needs --base-url and --model (or base_url/model in [inject])"),
    (["--agent", "gpt"], "--agent 'gpt' is not available"),
])
def test_inject_usage_errors(units_repo, tmp_path, capsys, args, message):
    code, _, err = run_cli(["inject", str(units_repo), "--out", str(tmp_path), *args], capsys)
    assert code == 2 and message in " ".join(err.split())
