"""`ssrkit inject` on the command line: --json lists the artifacts; bad flags are usage errors (exit 2)."""

from __future__ import annotations

import json

import pytest

import ssrkit.inject.procedural as procedural
from fixtures.sandboxes import local_sandbox
from ssrkit.cli.main import main


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
    (["--n", "2", "--shard", "3/3"], "--n 2 split 3 ways leaves shard 3/3 nothing: raise --n"),
])
def test_inject_usage_errors(units_repo, tmp_path, capsys, args, message):
    code, _, err = run_cli(["inject", str(units_repo), "--out", str(tmp_path), *args], capsys)
    assert code == 2 and message in " ".join(err.split())


def test_inject_needs_the_top_of_a_git_work_tree_and_a_directory_to_write(units_repo, tmp_path, capsys):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.py").write_text("x = 1\n")
    code, _, err = run_cli(["inject", str(plain), "--out", str(tmp_path / "o")], capsys)
    err = " ".join(err.split())
    assert code == 2 and "is not the top of a git repository" in err and "git init" in err
    code, _, err = run_cli(["inject", str(units_repo / "tests"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and f"its repository is {units_repo}" in "".join(err.split("\n"))
    (tmp_path / "file").write_text("")
    code, _, err = run_cli(["inject", str(units_repo), "--out", str(tmp_path / "file")], capsys)
    assert code == 2 and "is a file; give a directory" in " ".join(err.split()) and "Traceback" not in err
    assert not (tmp_path / "o").exists()


class _CountingSandbox:
    """A local sandbox that counts the test runs made in it: pre-screens (fail-fast) and test-script runs."""

    def __init__(self, sb, counts):
        self._sb, self._counts = sb, counts

    def __getattr__(self, name):
        return getattr(self._sb, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._sb.close()

    def run(self, command, *args, **kwargs):
        # a test-script run is one command, the diffs' applies (if any) in front of `bash …/test_script.sh`
        # (and, where the sandbox parses in the run, the parser after it)
        if "bash " in command and "/test_script.sh" in command or " -q -rfE -p no:cacheprovider" in command:
            self._counts.append(command)
        return self._sb.run(command, *args, **kwargs)


def test_inject_json_counts_the_test_runs_made_when_the_original_run_was_cached(calc_history_repo, tmp_path, monkeypatch,
                                                                              capsys):
    """inject.json's per-strategy `runs` is the number of test runs the candidates made: an original run
    taken from the cache is not one (today's bug: it was counted whenever the cache answered)."""
    opened: list[_CountingSandbox] = []
    counts: list[str] = []

    def factory(source, backend, options):
        # the first sandbox maps coverage (not a candidate's run); the workers' sandboxes count
        sb = local_sandbox(source)
        opened.append(_CountingSandbox(sb, counts if opened else []))
        return opened[-1]

    monkeypatch.setattr(procedural, "open_sandbox", factory)
    out = tmp_path / "out"
    code, _, _ = run_cli(["inject", str(calc_history_repo), "--out", str(out), "--n", "3", "--strategy", "expression",
                          "--seed", "3", "--json"], capsys)
    assert code == 0
    notes = [n for d in out.iterdir() if (d / "validation.json").is_file()
             for n in json.loads((d / "validation.json").read_text())["notes"]]
    assert "original run taken from the cache" in notes  # the case under test happened
    data = json.loads((out / "inject.json").read_text())
    assert sum(st["runs"] for st in data["by_strategy"].values()) == len(counts)


def test_inject_in_a_log_prints_progress_lines(units_repo, tmp_path, local_backend_sandbox, capsys, monkeypatch):
    """Not on a terminal (a log, a pipe, CI), Rich draws no bar: plain progress lines go to stderr instead."""
    import ssrkit.cli.progress as progress

    monkeypatch.setattr(progress, "EVERY", 0.0)
    code, out, err = run_cli(["inject", str(units_repo), "--out", str(tmp_path), "--n", "1",
                              "--strategy", "expression", "--seed", "5"], capsys)
    assert code == 0
    lines = [line for line in err.splitlines() if line.startswith("inject: ")]
    assert lines[0].startswith("inject: 0/1, 0s — ") and "test runner" in lines[0]
    assert any(line.startswith("inject: 1/1, ") and "1 valid — expression: valid" in line for line in lines)
    assert "1/1 valid artifact(s) written" in out
