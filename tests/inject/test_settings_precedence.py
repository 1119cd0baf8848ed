"""The procedural injector reads `[validate] test_patterns` through its validation settings only (#27 step 5.5):
settings a caller passes win over the configuration, as they do for every other threshold. Before, the config's
patterns won over explicit settings."""

from __future__ import annotations

from ssrkit.inject.procedural import Session
from ssrkit.store.config import Config
from ssrkit.validate import Settings


def test_explicit_settings_win_over_the_config_patterns(tmp_path):
    (tmp_path / "repo").mkdir()
    cfg = Config({"validate": {"test_patterns": ["from_config/*"]}})
    session = Session(tmp_path / "repo", tmp_path / "out", config=cfg, settings=Settings(test_patterns=["given/*"]))
    assert session.test_patterns == ["given/*"]


def test_without_settings_the_config_patterns_are_read(tmp_path):
    (tmp_path / "repo").mkdir()
    cfg = Config({"validate": {"test_patterns": ["from_config/*"]}})
    assert Session(tmp_path / "repo", tmp_path / "out", config=cfg).test_patterns == ["from_config/*"]
