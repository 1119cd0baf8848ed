"""The bug artifact: a directory holding one injected bug and everything needed to judge it (SPEC §1).

Every file name of the directory is defined here, once; every stage reads and writes through these names:

    ARTIFACT/
      bug_inject.diff      BUG_DIFF       the bug (code only)                                  inject
      test_weaken.diff     WEAKEN_DIFF    the test weakening that hides it (tests only)        inject
      test_script.sh       TEST_SCRIPT    runs the tests, prints a log                         inject
      test_files.txt       TEST_FILES     the test files the solver must not see changed       inject
      test_parser.py       TEST_PARSER    log -> {test id: status} JSON                        inject
      artifact.toml        METADATA       id, repository, base commit, strategy, order         inject
      trajectory.json      TRAJECTORY     the LLM injector's turns (LLM injections only)       inject
      validation.json      VALIDATION     checks, FAIL_TO_PASS / PASS_TO_PASS, validity        validate
      logs/                LOGS           one log per validation test run (`log_path`), and     validate
                                          the parser's stderr where a parse failed
      attempts/NNN/        ATTEMPTS       one solver attempt each (layout owned by attempts.py) solve
        fix.diff           FIX            the attempt's patch
        trajectory.json    TRAJECTORY     the LLM solver's turns
        test_output.log    TEST_OUTPUT    the graded test run's log
        canary_output.log  CANARY_OUTPUT  the canary run's log (a passing fix's second run, grade.py)
        eval.json          EVAL           the verdict, written last: without it the attempt is unfinished
      reward.json          REWARD         solver and injector rewards, by attempt name         reward

The five core files are the contract between stages; the paper's file names are accepted as aliases when
reading. Writes go through `Artifact.write_*` (atomic, never through a symlink out of the directory).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

import tomli_w

from .. import __version__
from ..errors import SsrkitError
from .fsutil import atomic_write_bytes, atomic_write_json, atomic_write_text, read_json
from .source import RepoSource

BUG_DIFF = "bug_inject.diff"
WEAKEN_DIFF = "test_weaken.diff"
TEST_SCRIPT = "test_script.sh"
TEST_FILES = "test_files.txt"
TEST_PARSER = "test_parser.py"
METADATA = "artifact.toml"
TRAJECTORY = "trajectory.json"
VALIDATION = "validation.json"
REWARD = "reward.json"
ATTEMPTS = "attempts"
LOGS = "logs"
FIX = "fix.diff"
EVAL = "eval.json"
TEST_OUTPUT = "test_output.log"
CANARY_OUTPUT = "canary_output.log"

#: The directories later stages write into an artifact: a unit that only reads the artifact's own files ships
#: without them.
OUTPUT_DIRS = (LOGS, ATTEMPTS)
#: The five files every artifact must have, in the order they are checked and hashed.
CORE_FILES = (BUG_DIFF, WEAKEN_DIFF, TEST_SCRIPT, TEST_FILES, TEST_PARSER)
#: The largest core file ssrkit reads (the diff limit of `patch.MAX_DIFF_BYTES`): a model writes them, and a
#: larger one (a sparse file of a GB) is refused by its size, before it is read
MAX_CORE_BYTES = 2 * 1024 * 1024

#: Names used by the paper's prompts, accepted when reading.
ALIASES = {
    BUG_DIFF: ("bug_patch.diff",),
    WEAKEN_DIFF: ("test_patch.diff",),
    TEST_PARSER: ("parse_test_output.py",),
}


#: next to a run's log: the stderr of the parse of that log, when the parse failed
PARSER_STDERR_SUFFIX = ".parser-stderr.log"


def log_path(run_name: str) -> str:
    """The log of the validation run `run_name` ("original", "bug", "bug+weaken", ...), relative to the artifact."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in run_name.replace("+", "-"))
    return f"{LOGS}/{safe}.log"


def parser_stderr_path(run_name: str) -> str:
    """Where the stderr of a run's failed parse is kept, next to the run's log."""
    return log_path(run_name).removesuffix(".log") + PARSER_STDERR_SUFFIX


def check_name(value: str, what: str = "id") -> str:
    """`value`, when it can name one directory entry: ids become directory names (`OUT/<id>`, a pool's
    `<repo>/<id>`), so an id is a name, never a path — no `/`, no `..`, no leading dot (hidden entries are
    work in progress), no control character. SsrkitError otherwise."""
    ok = (0 < len(value) <= 200 and "/" not in value and "\\" not in value and not value.startswith(".")
          and value.isprintable())
    if not ok:
        raise SsrkitError(f"{what} {value!r} is not a name (ids name directories: no '/', no leading '.', "
                          f"no control character); fix or delete it")
    return value


@dataclass
class Metadata:
    """Contents of `artifact.toml`."""

    id: str = ""
    repo: RepoSource | None = None
    base_commit: str | None = None
    strategy: str = "manual"
    order: int = 1
    parent: str | None = None
    created: str = ""
    injector: dict[str, Any] = field(default_factory=dict)
    ssrkit_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "strategy": self.strategy,
            "order": self.order,
            "created": self.created or now_iso(),
            "ssrkit_version": self.ssrkit_version,
        }
        if self.base_commit:
            out["base_commit"] = self.base_commit
        if self.parent:
            out["parent"] = self.parent
        if self.repo is not None:
            out["repo"] = self.repo.to_dict()
        if self.injector:
            out["injector"] = _drop_none(self.injector)
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any], relative_to: Path | None = None) -> "Metadata":
        known = {"id", "repo", "base_commit", "strategy", "order", "parent", "created", "injector",
                 "ssrkit_version"}
        repo = data.get("repo")
        if isinstance(repo, str):  # shorthand: repo = "/path/to/repo"
            repo = {"kind": "local", "path": repo}
        try:
            order = int(data.get("order", 1))
        except (TypeError, ValueError):
            raise SsrkitError(f"artifact.toml: 'order' must be an integer, got {data.get('order')!r}")
        art_id = str(data.get("id", ""))
        if art_id:
            check_name(art_id, "artifact.toml: id")
        return cls(
            id=art_id,
            repo=RepoSource.from_dict(repo, relative_to) if repo else None,
            base_commit=data.get("base_commit"),
            strategy=str(data.get("strategy", "manual")),
            order=order,
            parent=data.get("parent"),
            created=str(data.get("created", "")),
            injector=dict(data.get("injector", {})),
            ssrkit_version=str(data.get("ssrkit_version", "")),
            extra={k: v for k, v in data.items() if k not in known},
        )


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def content_id(files: dict[str, str]) -> str:
    """Content hash of the five core files: same bug + tests ⇒ same id, whoever wrote it."""
    h = hashlib.sha256()
    for name in CORE_FILES:
        data = files.get(name, "").encode("utf-8")
        h.update(name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()[:16]


class Artifact:
    """An artifact directory. Reading never fails on missing files: `validate` reports them."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_dir():
            raise SsrkitError(f"artifact {path} is not a directory")
        self._metadata: Metadata | None = None

    def __repr__(self) -> str:
        return f"Artifact({str(self.path)!r})"

    @property
    def name(self) -> str:
        return self.path.name

    # -- the five files ---------------------------------------------------------------------------
    def file(self, name: str) -> Path | None:
        """The path of a core file, looking through its aliases; None when absent."""
        for candidate in (name, *ALIASES.get(name, ())):
            p = self.path / candidate
            if p.is_file():
                return p
        return None

    def read(self, name: str) -> str:
        """A core file's text ('' when absent); undecodable bytes are replaced, never fatal. One over
        MAX_CORE_BYTES is refused (SsrkitError) by its size, before it is read."""
        p = self.file(name)
        if p is None:
            return ""
        size = p.stat().st_size
        if size > MAX_CORE_BYTES:
            raise SsrkitError(f"{p}: {size / 1048576:.1f} MiB, over the {MAX_CORE_BYTES // 1048576} MiB limit of an "
                              f"artifact file; it is not an artifact ssrkit reads (delete it or the artifact)")
        return p.read_bytes().decode("utf-8", errors="replace")

    @property
    def bug_diff(self) -> str:
        return self.read(BUG_DIFF)

    @property
    def weaken_diff(self) -> str:
        return self.read(WEAKEN_DIFF)

    @property
    def test_script(self) -> str:
        return self.read(TEST_SCRIPT)

    @property
    def test_parser(self) -> str:
        return self.read(TEST_PARSER)

    @property
    def test_files(self) -> list[str]:
        """Paths listed in test_files.txt (blank lines and `#` comments ignored, order kept)."""
        out = []
        for line in self.read(TEST_FILES).splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                out.append(line[2:] if line.startswith("./") else line)
        return out

    def core_texts(self) -> dict[str, str]:
        return {name: self.read(name) for name in CORE_FILES}

    def content_id(self) -> str:
        return content_id(self.core_texts())

    # -- metadata ---------------------------------------------------------------------------------
    @property
    def metadata(self) -> Metadata:
        if self._metadata is None:
            p = self.path / METADATA
            if p.is_file():
                try:
                    data = tomllib.loads(p.read_text(encoding="utf-8"))
                except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
                    raise SsrkitError(f"{p}: not valid TOML ({e}); fix or delete it")
                self._metadata = Metadata.from_dict(data, relative_to=self.path)
            else:
                self._metadata = Metadata(id=self.content_id())
        return self._metadata

    @property
    def has_metadata(self) -> bool:
        return (self.path / METADATA).is_file()

    @property
    def id(self) -> str:
        return self.metadata.id or self.content_id()

    def write_metadata(self, meta: Metadata) -> None:
        atomic_write_text(self.output_path(METADATA), tomli_w.dumps(meta.to_dict()))
        self._metadata = meta

    # -- outputs of later stages ------------------------------------------------------------------
    def output_path(self, relpath: str) -> Path:
        """The path of an output ssrkit writes or deletes (`validation.json`, `logs/x.log`, `attempts/001/…`).

        Every output stays inside the artifact directory: SsrkitError when a part of `relpath` below it is a
        symlink (`logs/` or `attempts/` linked elsewhere, a linked file), is not a directory where one is
        needed, or resolves outside it.
        """
        rel = PurePosixPath(relpath)
        if not rel.parts or rel.is_absolute() or ".." in rel.parts:
            raise SsrkitError(f"{relpath!r} is not a path inside the artifact {self.path}")
        cur = self.path
        for i, part in enumerate(rel.parts):
            cur = cur / part
            shown = "/".join(rel.parts[:i + 1])
            if cur.is_symlink():
                raise SsrkitError(f"{self.path}: {shown} is a symlink (to {os.readlink(cur)}); ssrkit writes and "
                                  f"deletes only inside the artifact directory — replace it with a real "
                                  f"{'directory' if i < len(rel.parts) - 1 else 'file'} or remove it")
            if i < len(rel.parts) - 1 and cur.exists() and not cur.is_dir():
                raise SsrkitError(f"{self.path}: {shown} is not a directory; remove it")
        base = os.path.realpath(self.path)
        if not os.path.realpath(cur).startswith(base + os.sep):
            raise SsrkitError(f"{self.path}: {relpath} resolves outside the artifact directory")
        return cur

    def write_text(self, relpath: str, text: str) -> Path:
        p = self.output_path(relpath)
        atomic_write_text(p, text)
        return p

    def write_bytes(self, relpath: str, data: bytes) -> Path:
        p = self.output_path(relpath)
        atomic_write_bytes(p, data)
        return p

    def write_json(self, relpath: str, obj: Any) -> Path:
        p = self.output_path(relpath)
        atomic_write_json(p, obj)
        return p

    def make_dir(self, relpath: str, *, exist_ok: bool = True) -> Path:
        """Create an output directory (and its parents) inside the artifact; FileExistsError unless `exist_ok`."""
        p = self.output_path(relpath)
        rel = PurePosixPath(relpath)
        for i in range(1, len(rel.parts)):
            self.output_path("/".join(rel.parts[:i])).mkdir(exist_ok=True)
        p.mkdir(exist_ok=exist_ok)
        return p

    def remove(self, relpath: str) -> None:
        """Delete an output file or directory tree inside the artifact (nothing when absent)."""
        p = self.output_path(relpath)
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()

    def read_json(self, relpath: str) -> Any | None:
        p = self.path / relpath
        if not p.is_file():
            return None
        try:
            return read_json(p)
        except (ValueError, UnicodeDecodeError) as e:
            raise SsrkitError(f"{p}: not valid JSON ({e}); delete it to recompute")

    @property
    def validation(self) -> dict[str, Any] | None:
        return self.read_json(VALIDATION)

    def current_validation(self) -> dict[str, Any]:
        """validation.json, provided it was made from the artifact's present files (its `content_id` is theirs:
        one without it proves nothing and is as stale as one of other files); SsrkitError otherwise."""
        data = self.validation
        if data is None:
            raise SsrkitError(f"{self.path} has not been validated (no {VALIDATION}); validate it first: "
                              f"ssrkit validate {self.path}")
        if not isinstance(data, dict) or data.get("content_id") != self.content_id():
            raise SsrkitError(f"{self.path}: {VALIDATION} was not made from its present files; validate it "
                              f"first: ssrkit validate {self.path} --redo")
        return data

    def validation_if_current(self) -> dict[str, Any] | None:
        """`current_validation()`, or None when there is none or it is stale or unreadable (for run-level
        views: a verdict that does not belong to the present files counts as none)."""
        try:
            return self.current_validation()
        except SsrkitError:
            return None

    @property
    def is_valid(self) -> bool:
        """Valid by a validation of its present files."""
        return bool((self.validation_if_current() or {}).get("valid"))

    @property
    def reward(self) -> dict[str, Any] | None:
        return self.read_json(REWARD)

    def attempt_dirs(self) -> list[Path]:
        d = self.path / ATTEMPTS
        if not d.is_dir():
            return []
        return sorted(p for p in d.iterdir() if p.is_dir() and p.name.isdigit())


def create_artifact(
    path: str | Path,
    *,
    bug_diff: str,
    weaken_diff: str,
    test_script: str,
    test_files: list[str],
    test_parser: str,
    metadata: Metadata,
    trajectory: dict[str, Any] | None = None,
) -> Artifact:
    """Write a new artifact directory; each file lands atomically, metadata last (it marks completion)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    texts = {
        BUG_DIFF: bug_diff,
        WEAKEN_DIFF: weaken_diff,
        TEST_SCRIPT: test_script,
        TEST_FILES: "".join(f"{f}\n" for f in test_files),
        TEST_PARSER: test_parser,
    }
    for name, text in texts.items():
        atomic_write_text(path / name, text)
    (path / TEST_SCRIPT).chmod(0o755)
    if trajectory is not None:
        atomic_write_json(path / TRAJECTORY, trajectory)
    if not metadata.id:
        metadata.id = content_id(texts)
    if not metadata.created:
        metadata.created = now_iso()
    art = Artifact(path)
    art.write_metadata(metadata)
    return art


def find_artifacts(paths: list[Path]) -> list[Artifact]:
    """Expand the paths given on a command line into artifacts.

    A path that is itself an artifact (holds any core file or artifact.toml) is taken as is; otherwise
    its direct and nested subdirectories that are artifacts are taken, sorted, so `ssrkit validate runs/r1/`
    works on a whole directory (hidden subdirectories, where commands keep unfinished work, are left out).
    """
    out: list[Artifact] = []
    files = [Path(p) for p in paths if Path(p).is_file()]
    if files and len(files) == len(paths):
        raise SsrkitError(f"{files[0]}: an artifact is a directory, not a file")
    if files:  # e.g. `ssrkit solve DIR/*` over what `inject --out DIR` wrote: inject.json, inject-config.toml
        import logging

        logging.getLogger("ssrkit").warning(
            "note: skipped %d file(s) that are not artifact directories: %s", len(files),
            ", ".join(str(f) for f in files[:5]) + (" ..." if len(files) > 5 else ""))
    for p in paths:
        p = Path(p)
        if p.is_file():
            continue
        if not p.exists():
            raise SsrkitError(f"{p}: no such artifact directory")
        if not p.is_dir():
            raise SsrkitError(f"{p}: an artifact is a directory, not a file")
        if _looks_like_artifact(p):
            out.append(Artifact(p))
            continue
        found = sorted({c.parent for c in p.rglob("*") if c.name in _MARKERS and c.is_file()})
        # attempts and logs hold no artifacts; hidden folders are work in progress (`.staging/`, `.<id>.partial/`)
        found = [f for f in found if ATTEMPTS not in f.relative_to(p).parts and LOGS not in f.relative_to(p).parts
                 and not any(part.startswith(".") for part in f.relative_to(p).parts)]
        if not found:
            raise SsrkitError(f"{p}: not an artifact (none of {', '.join(CORE_FILES)}) and holds none")
        out.extend(Artifact(f) for f in found)
    seen: set[Path] = set()
    unique = []
    for a in out:
        key = a.path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(a)
    return unique


_MARKERS = {METADATA, *CORE_FILES, *(a for names in ALIASES.values() for a in names)}


def _looks_like_artifact(p: Path) -> bool:
    return any((p / m).is_file() for m in _MARKERS)
