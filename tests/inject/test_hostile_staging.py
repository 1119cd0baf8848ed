"""Hostile output directories (issue 26.2): nothing `ssrkit inject` reads from `--out` steers where it writes or
deletes. A symlinked staging directory is refused before anything in it is touched; a staged artifact whose
artifact.toml names a path as its id, or whose files changed after its validation, is not reused. On both
example repositories (textkit: pytest; ledger: unittest)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssrkit.store.artifact import Artifact
from ssrkit.errors import SsrkitError
from ssrkit.executor import Shard
from ssrkit.inject.procedural import Session, inject
from ssrkit.sandbox import SandboxOptions

#: `python` in the example repositories' test scripts must be this interpreter (it has pytest)
OPTIONS = SandboxOptions(env={"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                              "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
REPOS = ["textkit", "ledger"]


def victim(tmp_path: Path) -> Path:
    """A directory of the user's, outside the output directory."""
    d = tmp_path / "victim"
    d.mkdir()
    (d / "thesis.tex").write_text("years of work\n")
    return d


@pytest.mark.parametrize("shard", [None, Shard(1, 2)], ids=["staging", "shard-staging"])
@pytest.mark.parametrize("name", REPOS)
def test_a_symlinked_staging_directory_is_refused_untouched(example_repos, name, shard, tmp_path):
    mine = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    staging = out / (".staging" if shard is None else f".staging-{shard.k}-of-{shard.n}")
    staging.symlink_to(mine)
    with pytest.raises(SsrkitError, match="is a symlink .*remove the link"):
        Session(example_repos[name], out, seed=0, backend="local", options=OPTIONS, shard=shard)
    assert (mine / "thesis.tex").read_text() == "years of work\n" and staging.is_symlink()


def test_the_command_line_says_so_in_one_line(example_repos, tmp_path):
    mine = victim(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / ".staging").symlink_to(mine)
    proc = subprocess.run([sys.executable, "-m", "ssrkit", "inject", str(example_repos["textkit"]), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and ".staging is a symlink" in proc.stderr
    assert (mine / "thesis.tex").is_file()


@pytest.mark.parametrize("name", REPOS)
def test_a_rerun_reuses_no_staged_artifact_that_is_not_what_it_staged(example_repos, name, tmp_path):
    """An interrupted run leaves two valid artifacts in staging; then one's artifact.toml says `id =
    "../victim"` and the other's test script changed after its validation. The rerun writes and deletes
    nothing outside `--out`, reuses neither, and ends with artifacts whose validations are their own."""
    mine = victim(tmp_path)
    out = tmp_path / "out"
    valid = []

    def stop_after_two(e):
        if e.kind == "candidate" and e.outcome.valid:
            valid.append(e.outcome)
            if len(valid) == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        inject(example_repos[name], out, n=2, seed=0, strategies="expression", backend="local", options=OPTIONS,
               on_event=stop_after_two)
    renamed, edited = sorted((out / ".staging").iterdir())
    toml = renamed / "artifact.toml"
    toml.write_text(toml.read_text().replace(f'id = "{Artifact(renamed).id}"', 'id = "../victim"', 1))
    assert 'id = "../victim"' in toml.read_text()
    with open(edited / "test_script.sh", "a") as fh:
        fh.write("exit 0\n")

    again = inject(example_repos[name], out, n=2, seed=0, strategies="expression", backend="local", options=OPTIONS)
    assert (mine / "thesis.tex").read_text() == "years of work\n" and sorted(p.name for p in mine.iterdir()) == [
        "thesis.tex"]
    assert len(again.artifacts) == 2 and not any(a.reused for a in again.artifacts)
    for a in again.artifacts:
        art = Artifact(a.path)
        assert a.path.parent == out and art.id == art.content_id() == a.id
        assert art.current_validation()["valid"] is True
        assert "exit 0" not in art.test_script


def test_a_symlinked_llm_injection_directory_is_refused(example_repos, tmp_path):
    """The LLM injector's `OUT/llm-s<seed>-<i>` would be read (a finished injection is reused), validated into
    and renamed: a link there, to a directory of the user's, is refused before anything is touched."""
    from ssrkit.store.config import Config
    from ssrkit.inject.llm import inject_llm
    from ssrkit.store.source import RepoSource

    mine = victim(tmp_path)
    (mine / "artifact.toml").write_text('id = "mine"\n')
    out = tmp_path / "out"
    out.mkdir()
    (out / "llm-s0-000").symlink_to(mine)
    with pytest.raises(SsrkitError, match="llm-s0-000 is a symlink"):
        inject_llm(RepoSource.local(example_repos["textkit"]), out, client=None, n=1, config=Config({}), backend="local",
                   options=OPTIONS)
    assert sorted(p.name for p in mine.iterdir()) == ["artifact.toml", "thesis.tex"]
