"""One resolved configuration: the settings classes' defaults < `ssrkit.toml` < command-line flags (SPEC §11).

The file has one section per stage (`[validate]`, `[sandbox]`, `[inject]`, `[solve]`, `[reward]`, `[train]`,
`[agent]`, `[run]`), each read by settings classes (`SECTIONS`) through one loader (`load_settings`): a field's
type checks its value, its metadata (`setting`) carries its help, and a key no reader reads is an error.
A repository may carry its own `ssrkit.toml` (a per-repository profile); the user's file wins over it. The
resolved configuration is written next to outputs so any run can be replayed.

Repositories come from the internet, so a profile may say only how the repository's tests run (`REPO_PROFILE`):
the runner and its arguments, the setup command, the test budget, environment variables that name nothing of
the host outside the repository, and more test patterns or protected files (added to ssrkit's, never
replacing them). Grading protections (`[solve] canary`, `guard_shadows`), the sandbox's limits, backend and
view of the host, the model endpoints and keys, where units run (`[run]`), validity thresholds, training and
rewards change only by the user's own file (`--config`, `$SSRKIT_CONFIG`, `./ssrkit.toml` outside the
repository) or a flag. Whatever else a profile sets is ignored, and ssrkit says so in one line.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import json
import logging
import os
import re
import tomllib
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any, Callable, TypeVar

import tomli_w

from ..errors import SsrkitError
from ..verdict.patterns import DEFAULT_PROTECTED, DEFAULT_TEST_PATTERNS
from .fsutil import atomic_write_text


#: The sections of ssrkit.toml and the settings classes that read each ("module:Class"). A section holds no
#: defaults here: each setting's default is a field of the class that reads it (`load_settings`), so it is
#: written once; the keys a section accepts are the settable fields of its readers (any other is an error).
#: Named, not imported: store/ is the bottom layer, and a command imports only the readers of what it reads.
SECTIONS: dict[str, tuple[str, ...]] = {
    "validate": ("ssrkit.validate.settings:Settings",),
    "sandbox": ("ssrkit.sandbox.settings:SandboxSettings",),
    "inject": ("ssrkit.inject.runner:InjectSettings", "ssrkit.agents.client:ModelSettings"),
    "solve": ("ssrkit.solve.engine:SolveOptions", "ssrkit.solve.grade:GradeSettings",
              "ssrkit.agents.client:ModelSettings"),
    "reward": ("ssrkit.store.attempts:RewardSettings",),
    "train": ("ssrkit.train.config:TrainConfig",),
    "agent": ("ssrkit.agents.loop:AgentConfig", "ssrkit.agents.client:AgentSampling"),
    "run": ("ssrkit.executor:ExecutorSettings", "ssrkit.store.runs:RecipeRecord"),
}

CONFIG_NAME = "ssrkit.toml"

#: What a repository's own ssrkit.toml may set: how its tests run, by section. Nothing here can weaken grading
#: or show the sandbox more of the host; everything else in a profile is ignored (with a note).
REPO_PROFILE = {
    "inject": ("runner", "python", "test_command", "args", "discover", "exclude_tests", "coverage_timeout",
               "screen_timeout"),
    "validate": ("timeout", "test_patterns"),
    "sandbox": ("setup", "env"),
    "solve": ("protected",),
}
#: Lists a profile extends rather than replaces: it may add test patterns and protected files, never drop one
REPO_ADDITIVE = {("validate", "test_patterns"): DEFAULT_TEST_PATTERNS, ("solve", "protected"): DEFAULT_PROTECTED}


class Config:
    """Sections of settings; `cfg.get("validate", "timeout")`, `cfg.section("sandbox")`. `ignored`: what the
    repository's profile asked for and was not given (`[section] key` each)."""

    def __init__(self, data: dict[str, dict[str, Any]], sources: list[str] | None = None,
                 ignored: list[str] | None = None):
        self.data = data
        self.sources = sources or []
        self.ignored = ignored or []

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


def _read_sections(path: Path) -> dict[str, Any]:
    loaded = read_toml(path)
    unknown = [k for k, v in loaded.items() if isinstance(v, dict) and k not in SECTIONS]
    if unknown:
        raise SsrkitError(f"{path}: unknown section(s) {', '.join('[' + u + ']' for u in unknown)}; "
                          f"known: {', '.join('[' + s + ']' for s in SECTIONS)}")
    return loaded


def _inside(value: str, repo: Path) -> bool:
    """Whether every path in an environment value (`:`-separated) stays inside the repository: relative
    without `..`, or absolute under it. Anything else could show the sandbox a directory of the host."""
    root = os.path.realpath(repo)
    for part in str(value).split(os.pathsep):
        if part.startswith("~") or ".." in Path(part).parts:
            return False
        if os.path.isabs(part) and os.path.commonpath([os.path.realpath(part), root]) != root:
            return False
    return True


def repo_profile(data: dict[str, Any], repo: Path) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(what a repository's profile may set of `data`, per `REPO_PROFILE`; what it asked for and is ignored)."""
    kept: dict[str, dict[str, Any]] = {}
    ignored: list[str] = []
    for section, values in data.items():
        if not isinstance(values, dict):
            ignored.append(section)
            continue
        allowed = REPO_PROFILE.get(section, ())
        for key, value in values.items():
            if key not in allowed:
                ignored.append(f"[{section}] {key}")
            elif (section, key) == ("sandbox", "env") and isinstance(value, dict):
                env = {k: v for k, v in value.items() if _inside(str(v), repo)}
                ignored += [f"[sandbox] env {k}" for k in value if k not in env]
                kept.setdefault(section, {})[key] = env
            elif (section, key) in REPO_ADDITIVE and isinstance(value, list):
                base = REPO_ADDITIVE[(section, key)]
                kept.setdefault(section, {})[key] = [*base, *(v for v in value if v not in base)]
            else:
                kept.setdefault(section, {})[key] = value
    return kept, ignored


def _user_file(path: Path | None, repo_file: Path | None) -> Path | None:
    """The user's own file: `path`, else $SSRKIT_CONFIG, else ./ssrkit.toml — unless that is the repository's
    own profile (ssrkit run from inside the repository), which is never the user's."""
    if path is not None:
        return Path(path)
    if os.environ.get("SSRKIT_CONFIG"):
        return Path(os.environ["SSRKIT_CONFIG"])
    here = Path(CONFIG_NAME)
    if here.is_file() and not (repo_file is not None and here.resolve() == repo_file.resolve()):
        return here
    return None


def load_config(path: Path | None = None, repo: Path | None = None) -> Config:
    """The repository's profile (only what `REPO_PROFILE` lets it set: the rest is ignored, with a warning
    naming it), then the user's file: `path`, or $SSRKIT_CONFIG, or ./ssrkit.toml; defaults are the settings
    classes' own."""
    data: dict[str, dict[str, Any]] = {}
    sources = ["defaults"]
    ignored: list[str] = []
    repo_file = Path(repo) / CONFIG_NAME if repo is not None and (Path(repo) / CONFIG_NAME).is_file() else None
    if repo_file is not None:
        kept, ignored = repo_profile(_read_sections(repo_file), Path(repo))  # type: ignore[arg-type]
        _merge(data, kept)
        sources.append(str(repo_file))
        if ignored:
            logging.getLogger("ssrkit").warning(
                "ssrkit: %s: ignored %s (a repository's profile says only how its tests run; grading protections "
                "and the sandbox's view of the host change only by your own ssrkit.toml, --config, or a flag)",
                repo_file, ", ".join(ignored))
    user = _user_file(path, repo_file)
    if user is not None:
        _merge(data, _read_sections(user))
        sources.append(str(user))
    return Config(data, sources, ignored)


# -- settings: one loader for every section ------------------------------------------------------------

T = TypeVar("T")


def setting(default: Any = dataclasses.MISSING, *, help: str, factory: Callable[[], Any] | None = None,
            panel: str = "", config: bool = True, section: str | None = None) -> Any:
    """A field of a settings class whose metadata documents it: `help` (--help and the docs), `panel` (the
    --help group), `config` (False: not settable from ssrkit.toml — e.g. the sandbox's network), `section`
    (read from another section than the class's `SECTION`)."""
    meta = {"help": help, "panel": panel, "config": config, "section": section}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class FieldHelp:
    name: str
    help: str
    panel: str
    default: Any
    kind: Any  # the field's type: bool, int, float, str, list[str], dict[str, str], X | None
    section: str | None  # the section that sets it; None: the class's own (`SECTION`, or where it is loaded from)
    config: bool  # settable from ssrkit.toml


def settings_help(cls: type) -> dict[str, FieldHelp]:
    """Every field of a settings class with its help, panel, default, type and section, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        meta = f.metadata
        out[f.name] = FieldHelp(f.name, meta.get("help", ""), meta.get("panel", ""), default, hints[f.name],
                                meta.get("section") or getattr(cls, "SECTION", None), meta.get("config", True))
    return out


def _reader(path: str) -> type:
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


@cache
def known_keys(section: str) -> tuple[str, ...]:
    """The keys `[section]` accepts: the settable fields its readers (`SECTIONS`) read from it."""
    keys = [h.name for path in SECTIONS.get(section, ()) for h in settings_help(_reader(path)).values()
            if h.config and (h.section or section) == section]
    return tuple(dict.fromkeys(keys))


def config_source(cfg: Config) -> str:
    """The file a setting came from, for errors (the last one read: the one a user wrote)."""
    return next((s for s in reversed(cfg.sources) if s != "defaults"), "the configuration")


def check_section(cfg: Config, section: str) -> dict[str, Any]:
    """`[section]` of `cfg` (keys with `-` read as `_`), or an error naming the unknown key, the closest known
    one and all of them."""
    table = cfg.data.get(section, {})
    where = config_source(cfg)  # a profile's unknown keys never get here: `repo_profile` keeps only what it may set
    if not isinstance(table, dict):
        raise SsrkitError(f"{where}: [{section}] must be a table")
    known = known_keys(section)
    for key in table:
        name = key.replace("-", "_")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SsrkitError(f"{where}: [{section}]: unknown setting {key!r}{hint}; known: {', '.join(known)}")
    return {k.replace("-", "_"): v for k, v in table.items()}


_KINDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string", Any: "anything"}


def kind_name(kind: Any) -> str:
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " or ".join(kind_name(a) for a in typing.get_args(kind) if a is not type(None))
    if typing.get_origin(kind) is list:
        return "a list of strings"
    if typing.get_origin(kind) is dict:
        return "a table of strings"
    return _KINDS.get(kind, getattr(kind, "__name__", str(kind)))


_CHECKS: dict[Any, Callable[[Any], bool]] = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    str: lambda v: isinstance(v, str),
}


def _fits(value: Any, kind: Any) -> tuple[bool, Any]:
    """(whether `value` is a `kind`, the value as that kind)."""
    origin = typing.get_origin(kind)
    if kind is Any:
        return True, value
    if origin in (typing.Union, types.UnionType):
        for alt in typing.get_args(kind):
            if alt is not type(None):
                ok, out = _fits(value, alt)
                if ok:
                    return ok, out
        return False, value
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        return ok, list(value) if ok else value
    if origin is dict:
        scalars = isinstance(value, dict) and all(isinstance(v, (str, int, float, bool)) for v in value.values())
        return scalars, {str(k): str(v) for k, v in value.items()} if scalars else value
    if kind not in _CHECKS:  # a nested settings object, given by the code (never by the file)
        return isinstance(value, kind), value
    return _CHECKS[kind](value), value


def coerce(where: str, value: Any, kind: Any) -> Any:
    """`value` checked against the field's type (the first alternative of a union that fits): a comma-separated
    string is a list; a table's values become strings; an integer where a number is expected stays as written
    (the validation key hashes the file's values, `validate.Settings.key`). Anything else is an error naming
    `where` (`[section] key` or `--flag`), the type and the value."""
    ok, out = _fits(value, kind)
    if not ok:
        raise SsrkitError(f"{where} must be {kind_name(kind)}, got {value!r}")
    return out


def load_settings(cls: type[T], cfg: Config | None, *, section: str | None = None, **flags: Any) -> T:
    """defaults < the file (`[cls.SECTION]`, or `[section]` for a class without one; a field may name another
    section) < `flags` (None = not given), each value checked and coerced by its field's type (`coerce`). An
    unknown key in a section read is an error (`check_section`); fields with `config=False` are never read
    from the file."""
    helps = settings_help(cls)
    values: dict[str, Any] = {}
    tables: dict[str, dict[str, Any]] = {}
    for name, h in helps.items():
        sec = h.section or section
        if cfg is None or not h.config or sec is None:
            continue
        if sec not in tables:
            tables[sec] = check_section(cfg, sec)
        if name in tables[sec]:
            values[name] = coerce(f"{config_source(cfg)}: [{sec}] {name}", tables[sec][name], h.kind)
    for name, value in flags.items():
        if name not in helps:
            raise SsrkitError(f"unknown option {name} for {cls.__name__}")
        if value is not None:
            values[name] = coerce("--" + name.replace("_", "-"), value, helps[name].kind)
    return cls(**values)


def _shown(value: Any) -> str:
    if value is None:
        return "—"
    return json.dumps(value, ensure_ascii=False).replace("|", "\\|")


def settings_reference() -> str:
    """docs/config.md's tables: every key of every section with its type, default and meaning, made from the
    readers' field metadata (`python -m ssrkit.store.config` prints it; a test keeps the page equal to it)."""
    out = []
    for section, readers in SECTIONS.items():
        out += [f"### [{section}]", "", "| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        for path in readers:
            for h in settings_help(_reader(path)).values():
                if h.config and (h.section or section) == section:
                    kind = "any" if h.kind is Any else re.sub(r"\b(a|an) ", "", kind_name(h.kind))
                    out.append(f"| `{h.name}` | {kind} | `{_shown(h.default)}` | {h.help.replace('|', '/')} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(settings_reference(), end="")
