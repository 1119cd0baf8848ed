"""The artifact directory: aliases, metadata round-trip, atomic writes, ids, discovery."""

import json
import os
from pathlib import Path

import pytest

from fixtures.git import init_repo
from ssrkit.store.artifact import Artifact, Metadata, create_artifact, find_artifacts
from ssrkit.errors import SsrkitError
from ssrkit.store.source import RepoSource


def write_five(path, **over):
    path.mkdir(parents=True)
    files = {"bug_inject.diff": "b", "test_weaken.diff": "w", "test_script.sh": "s", "test_files.txt": "tests/t.py\n",
             "test_parser.py": "p"}
    files.update(over)
    for k, v in files.items():
        if v is not None:
            (path / k).write_text(v)
    return Artifact(path)


def test_paper_aliases_are_read(tmp_path):
    a = write_five(tmp_path / "a", **{"bug_inject.diff": None, "test_weaken.diff": None, "test_parser.py": None})
    (a.path / "bug_patch.diff").write_text("BUG")
    (a.path / "test_patch.diff").write_text("WEAK")
    (a.path / "parse_test_output.py").write_text("PARSER")
    assert (a.bug_diff, a.weaken_diff, a.test_parser) == ("BUG", "WEAK", "PARSER")


def test_test_files_ignore_blanks_comments_and_dot_slash(tmp_path):
    a = write_five(tmp_path / "a", **{"test_files.txt": "# oracle tests\n./tests/a.py\n\n tests/b.py \n"})
    assert a.test_files == ["tests/a.py", "tests/b.py"]


def test_content_id_depends_on_content_only(tmp_path):
    a = write_five(tmp_path / "a")
    b = write_five(tmp_path / "b")
    c = write_five(tmp_path / "c", **{"bug_inject.diff": "other"})
    assert a.content_id() == b.content_id() != c.content_id()


def test_create_and_reload_metadata(tmp_path):
    repo = init_repo(tmp_path / "repo")  # artifact.toml names git repositories only
    meta = Metadata(repo=RepoSource.local(repo), base_commit="abc", strategy="removal",
                    injector={"agent": "procedural", "seed": 3, "model": None})
    art = create_artifact(tmp_path / "art", bug_diff="d", weaken_diff="w", test_script="s",
                          test_files=["tests/x.py"], test_parser="p", metadata=meta)
    again = Artifact(art.path)
    assert again.metadata.repo == RepoSource.local(repo)
    assert again.metadata.strategy == "removal"
    assert again.metadata.injector == {"agent": "procedural", "seed": 3}
    assert again.id == art.content_id()
    assert not list(art.path.glob(".*.tmp"))  # atomic writes leave no temporaries


def test_broken_toml_is_a_clear_error(tmp_path):
    a = write_five(tmp_path / "a")
    (a.path / "artifact.toml").write_text("id = [unterminated")
    with pytest.raises(SsrkitError, match="not valid TOML"):
        _ = a.metadata


def test_find_artifacts_expands_directories(tmp_path):
    write_five(tmp_path / "runs" / "x")
    write_five(tmp_path / "runs" / "y")
    (tmp_path / "runs" / "x" / "attempts" / "001").mkdir(parents=True)
    (tmp_path / "runs" / "x" / "attempts" / "001" / "test_files.txt").write_text("no")  # not an artifact
    found = find_artifacts([tmp_path / "runs"])
    assert [a.name for a in found] == ["x", "y"]
    with pytest.raises(SsrkitError, match="no such artifact"):
        find_artifacts([tmp_path / "missing"])


def test_find_artifacts_skips_hidden_work_in_progress(tmp_path):
    write_five(tmp_path / "runs" / "x")
    write_five(tmp_path / "runs" / ".staging" / "expression-00001")  # a killed injection's staging area
    write_five(tmp_path / "runs" / "tasks" / ".y.partial")  # a killed copy
    assert [a.name for a in find_artifacts([tmp_path / "runs"])] == ["x"]


def test_artifact_toml_repository_must_be_a_git_repository(tmp_path):
    from ssrkit.store.artifact import Artifact
    from ssrkit.errors import SsrkitError
    from ssrkit.sandbox import fingerprint, open_sandbox

    art = tmp_path / "art"
    art.mkdir()
    (art / "bug_inject.diff").write_text("")
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    copies = lambda: sorted(p.name for p in Path("/dev/shm").glob(f"ssrkit-{os.getpid()}-*/sb-*"))  # noqa: E731
    before = copies()
    for path in ("/", str(plain)):
        (art / "artifact.toml").write_text(f'[repo]\nkind = "local"\npath = "{path}"\n')
        source = Artifact(art).metadata.repo  # reading the metadata is fine
        for use in (lambda: open_sandbox(source, "local"), lambda: fingerprint(source)):
            with pytest.raises(SsrkitError, match="not the top of a git repository"):
                use()
    assert copies() == before  # nothing was copied
    init_repo(plain)
    (art / "artifact.toml").write_text(f'[repo]\nkind = "local"\npath = "{plain / "sub"}"\n')
    with pytest.raises(SsrkitError, match=f"its repository is {plain}"):
        fingerprint(Artifact(art).metadata.repo)
    (art / "artifact.toml").write_text(f'[repo]\nkind = "local"\npath = "{plain}"\n')
    assert fingerprint(Artifact(art).metadata.repo)


@pytest.mark.parametrize("bad", ["../victim", "a/b", ".hidden", "..", "x\ny"])
def test_an_id_is_a_name_never_a_path(tmp_path, bad):
    """ids become directory names (OUT/<id>, a pool's <repo>/<id>): artifact.toml cannot make one a path."""
    write_five(tmp_path / "a")
    (tmp_path / "a" / "artifact.toml").write_text(f"id = {json.dumps(bad)}\n")
    with pytest.raises(SsrkitError, match="is not a name"):
        Artifact(tmp_path / "a").id


def test_a_core_file_is_sized_before_it_is_read(tmp_path):
    """A size bomb in an artifact directory (a 900 MB sparse bug_inject.diff) is refused by its size, unread."""
    write_five(tmp_path / "a")
    with open(tmp_path / "a" / "bug_inject.diff", "wb") as fh:
        fh.truncate(900 * 1024 * 1024)
    art = Artifact(tmp_path / "a")
    with pytest.raises(SsrkitError, match="900.0 MiB, over the 2 MiB limit of an artifact file"):
        art.bug_diff
    with pytest.raises(SsrkitError, match="over the 2 MiB limit"):
        art.content_id()
