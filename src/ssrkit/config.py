"""One resolved configuration: the settings classes' defaults < `ssrkit.toml` < command-line flags (SPEC §11).

The file has one section per stage (`[validate]`, `[sandbox]`, `[inject]`, `[solve]`, `[reward]`, `[train]`).
A repository may carry its own `ssrkit.toml` (a per-repository profile: test setup, environment); the
user's file wins over it. The resolved configuration is written next to outputs so any run can be replayed.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import tomli_w

from .errors import SsrkitError
from .fsutil import atomic_write_text

DEFAULT_TEST_PATTERNS = ["tests/", "test/", "testing/", "test_*.py", "*_test.py", "conftest.py"]
#: Files restored to their original content (or deleted when a fix adds them) before a fix is graded: the files
#: that steer the test runner, the interpreter's start-up hooks, and modules that would shadow the runner itself.
#: A pattern with a slash at the end names a directory anywhere (globs allowed); one without, a file name anywhere.
DEFAULT_PROTECTED = [
    "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml", "tox.ini", "setup.cfg",
    "pyproject.toml", "noxfile.py",
    "sitecustomize.py", "usercustomize.py", "*.pth",
    "pytest.py", "pytest/", "_pytest/", "py.py", "pluggy/", "unittest.py", "unittest/",
    "*.egg-info/", "*.dist-info/", "*.egg-link", "__pycache__/", "*.pyc", "*.so", "*.pyd",
]

#: The sections of ssrkit.toml and who reads each. A section holds no defaults here: each setting's default is
#: the field of the settings class that reads it (`X.from_config(cfg, **flags)`), so it is written once.
SECTIONS = {
    "validate": "validate.Settings (and the test budget of grade.GradeSettings)",
    "sandbox": "sandbox.SandboxOptions, sandbox.backend_from_config",
    "inject": "inject.procedural / inject.llm",
    "solve": "solve.SolveOptions, grade.GradeSettings (protected, canary, guard_shadows)",
    "reward": "attempts.reward_alpha",
    "train": "train.config.TrainConfig",
    "agent": "agents.loop.AgentConfig, the sampling of agents.endpoints.client_from_config",
    "run": "executor.executor_from_config",
}

CONFIG_NAME = "ssrkit.toml"


class Config:
    """Sections of settings; `cfg.get("validate", "timeout")`, `cfg.section("sandbox")`."""

    def __init__(self, data: dict[str, dict[str, Any]], sources: list[str] | None = None):
        self.data = data
        self.sources = sources or []

    def section(self, name: str) -> dict[str, Any]:
        return self.data.setdefault(name, {})

    def get(self, section: str, key: str, default: Any = None) -> Any:
        return self.data.get(section, {}).get(key, default)

    def override(self, section: str, **values: Any) -> "Config":
        """Apply command-line flags; a flag left at None keeps the file's value."""
        sec = self.section(section)
        for k, v in values.items():
            if v is not None:
                sec[k] = v
        return self

    def to_toml(self) -> str:
        return tomli_w.dumps(_drop_none(self.data))

    def write(self, path: Path) -> None:
        atomic_write_text(path, self.to_toml())


def _drop_none(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _drop_none(v) for k, v in obj.items() if v is not None}
    if isinstance(obj, (list, tuple)):
        return [_drop_none(v) for v in obj if v is not None]
    return obj


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SsrkitError(f"config file {path} does not exist")
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise SsrkitError(f"{path}: not valid TOML: {e}")


def load_config(path: Path | None = None, repo: Path | None = None) -> Config:
    """The repository's profile, then `path` (or $SSRKIT_CONFIG, or ./ssrkit.toml); defaults are the settings
    classes' own."""
    data: dict[str, dict[str, Any]] = {}
    sources = ["defaults"]
    candidates: list[Path] = []
    if repo is not None and (Path(repo) / CONFIG_NAME).is_file():
        candidates.append(Path(repo) / CONFIG_NAME)
    if path is not None:
        candidates.append(Path(path))
    elif os.environ.get("SSRKIT_CONFIG"):
        candidates.append(Path(os.environ["SSRKIT_CONFIG"]))
    elif Path(CONFIG_NAME).is_file():
        candidates.append(Path(CONFIG_NAME))
    for c in candidates:
        loaded = read_toml(c)
        unknown = [k for k, v in loaded.items() if isinstance(v, dict) and k not in SECTIONS]
        if unknown:
            raise SsrkitError(f"{c}: unknown section(s) {', '.join('[' + u + ']' for u in unknown)}; "
                              f"known: {', '.join('[' + s + ']' for s in SECTIONS)}")
        _merge(data, loaded)
        sources.append(str(c))
    return Config(data, sources)
