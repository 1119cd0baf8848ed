"""One owner for the cache root and for the names of a run directory (#27 step 2.4)."""

from __future__ import annotations

from ssrkit.store import cache, runs
from ssrkit.store.artifact import log_path, parser_stderr_path


def test_the_cache_root_is_read_from_the_environment_at_each_call(monkeypatch, tmp_path):
    monkeypatch.delenv("SSRKIT_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.original_runs_dir() == tmp_path / "xdg" / "ssrkit" / "original-runs"
    monkeypatch.setenv("SSRKIT_CACHE", str(tmp_path / "mine"))
    assert [cache.original_runs_dir(), cache.testmaps_dir(), cache.node_repos_dir()] == [
        tmp_path / "mine" / "original-runs", tmp_path / "mine" / "testmaps", tmp_path / "mine" / "repos"]


def test_validate_and_the_executor_read_the_same_root(monkeypatch, tmp_path):
    from ssrkit.executor import node_cache
    from ssrkit.validate import cache_dir

    monkeypatch.setenv("SSRKIT_CACHE", str(tmp_path))
    assert cache_dir().parent == node_cache().parent == cache.cache_root() == tmp_path


def test_rounds_and_injection_records(tmp_path):
    for name in ("round-002", "round-010", "round-x", "round-003.txt"):
        (tmp_path / name).mkdir() if name != "round-003.txt" else (tmp_path / name).write_text("")
    assert runs.round_numbers(tmp_path) == [2, 10]
    assert runs.round_dir(tmp_path, 7) == tmp_path / "round-007"

    class Shard:
        k, n = 2, 3

    out = tmp_path / "round-002" / runs.INJECT / "calc"
    out.mkdir(parents=True)
    for name in (runs.summary_name(), runs.summary_name(Shard())):
        (out / name).write_text('{"by_strategy": {}}')
    (out / "broken-inject.json").write_text("")
    assert sorted(p.name for p in runs.inject_records(tmp_path)) == ["inject-2-of-3.json", "inject.json"]
    assert runs.read_inject_record(out / "inject.json") == {"by_strategy": {}}
    (out / "inject.json").write_text("[")
    assert runs.read_inject_record(out / "inject.json") is None


def test_a_runs_log_names():
    assert log_path("original") == "logs/original.log"
    assert log_path("bug+weaken") == "logs/bug-weaken.log"
    assert parser_stderr_path("bug") == "logs/bug.parser-stderr.log"
