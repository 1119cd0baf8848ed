"""Configuration layering: defaults < repository profile < user file < flags."""

import pytest

from ssrkit.store.config import load_config
from ssrkit.errors import SsrkitError
from ssrkit.validate import Settings

pytestmark = pytest.mark.fast


def test_layers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "ssrkit.toml").write_text("[validate]\ntimeout = 30\nmin_passing_tests = 3\n[sandbox]\nsetup = 'make gen'\n")
    user = tmp_path / "mine.toml"
    user.write_text("[validate]\nmin_passing_tests = 7\n")
    cfg = load_config(user, repo)
    assert cfg.get("validate", "timeout") == 30
    assert cfg.get("validate", "min_passing_tests") == 7
    cfg.override("validate", min_passing_tests=None, jobs=3)
    s = Settings.from_section(cfg.section("validate"))
    assert (s.min_passing_tests, s.jobs, s.timeout) == (7, 3, 30)
    assert "setup = " in cfg.to_toml()


def test_unknown_section_and_bad_toml(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[valdate]\ntimeout = 1\n")
    with pytest.raises(SsrkitError, match="unknown section"):
        load_config(f)
    f.write_text("[validate\n")
    with pytest.raises(SsrkitError, match="not valid TOML"):
        load_config(f)


def test_bad_settings_are_user_errors():
    with pytest.raises(SsrkitError, match="total_break"):
        Settings.from_section({"total_break": "maybe"})
