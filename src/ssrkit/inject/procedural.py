"""The procedural injector: no model, seeded, reproducible (SPEC §4).

Pipeline for one repository:

1. Open one sandbox per worker; map the suite's per-test coverage once (cached per repository state).
2. Candidate streams, one per strategy, each driven by its own seeded RNG:
   `expression` and `removal` pick a covered function, an operator, then a site on a covered line;
   `history` undoes, in today's code, past commits that changed code and tests; `combine` merges 2–3
   valid bugs of this run that touch different files.
3. Per candidate, in a worker's sandbox (reset between candidates, never re-created): write the bug and
   take `git diff`; pre-screen by running only the tests covering the mutated lines with fail-fast
   (nothing fails, or the tests do not even import ⇒ discard); run the selected test files to find the
   failing tests; remove exactly those test functions (`test_weaken.diff`); write the artifact and
   validate it with `ssrkit.validate` in the same sandbox. Only valid artifacts are kept.
4. Each strategy keeps the first valid artifacts of its stream, in stream order, up to its share of
   `n`, whatever order the workers finish in: the same seed gives the same artifacts (ids are content
   hashes; `created` is the only field that differs). A strategy that runs dry passes its share on.

Core module: no rendering; progress is reported through `on_event`.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import random
import shutil
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import combinations
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import patch as patches
from ..artifact import BUG_DIFF, METADATA, VALIDATION, Artifact, Metadata, create_artifact
from ..config import Config, load_config
from ..errors import SsrkitError
from ..executor import Executor, LocalExecutor, Shard
from ..fsutil import atomic_write_json
from ..sandbox import Sandbox, SandboxOptions, open_sandbox
from ..source import RepoSource
from ..testrun import PASSED, run_tests
from ..validate import Settings, Validator, write_report
from .history import MAX_CODE_LINES, Commit, Revert, list_commits, recent_first, revert
from .operators import EXPRESSION, REMOVAL, Function, Mutation, functions, mutations
from .runner import PYTEST, UNITTEST, Profile, load_profile, locate_test
from .source_text import SourceText
from .testmap import TestMap, build_testmap, repo_fingerprint
from .weaken import WeakenError, relocate, remove_tests

HISTORY = "history"
COMBINE = "combine"
STRATEGIES = (EXPRESSION, REMOVAL, HISTORY, COMBINE)
BASE = "inject-base"
AGENT = "procedural"
MAX_PRESCREEN_TESTS = 200
MIN_SCREEN_TIMEOUT = 15.0  # seconds
COVERAGE_TIMEOUT = 600.0  # seconds for the whole suite under coverage (default of [inject] coverage_timeout)
SCREEN_TIMEOUT_FACTOR = 3.0  # × the whole suite's duration under coverage

# outcome statuses
VALID, REUSED = "valid", "reused"
DISCARDS = ("unchanged", "duplicate", "no_tests", "harmless", "import_error", "timeout", "total_break",
            "unweakenable", "invalid", "error")
#: the setting that most often changes a run whose candidates were all discarded for this reason
_HINTS = {
    "no_tests": "[validate] min_passing_tests in ssrkit.toml (fewer passing tests cover each candidate)",
    "harmless": "--max-tries (more candidates per strategy), or more tests in [inject] args",
    "import_error": "[inject] args or test_command in ssrkit.toml (the covering tests do not even import "
                    "with the bug: check how they are run)",
    "timeout": "[inject] screen_timeout in ssrkit.toml (seconds per pre-screen and bug run)",
    "total_break": "--max-tries (more candidates), or [validate] total_break = \"warning\"",
    "unweakenable": "[inject] exclude_tests in ssrkit.toml (the failing tests cannot be located or edited)",
    "invalid": "[validate] settings in ssrkit.toml (see the first failing check above)",
    "duplicate": "--seed (another stream of candidates) or a fresh --out",
    "unchanged": "--max-tries (more candidates per strategy)",
    "error": "[inject] runner / python / test_command in ssrkit.toml",
}


@dataclass
class Candidate:
    strategy: str
    index: int  # position in its strategy's stream
    operator: str
    target: str
    detail: str
    line: int | None = None
    files: dict[str, str | None] = field(default_factory=dict)  # new contents (None = delete)
    patches: list[str] = field(default_factory=list)  # combine: component bug diffs
    prescreen_tests: list[str] = field(default_factory=list)
    test_files: list[str] = field(default_factory=list)
    components: list[str] = field(default_factory=list)

    def injector(self, seed: int) -> dict[str, Any]:
        d: dict[str, Any] = {"agent": AGENT, "operator": self.operator, "seed": seed, "target": self.target,
                             "detail": self.detail, "candidate": self.index}
        if self.line is not None:
            d["line"] = self.line
        if self.components:
            d["components"] = self.components
        return d


@dataclass
class Outcome:
    candidate: Candidate
    status: str
    message: str = ""
    artifact: Path | None = None
    artifact_id: str | None = None
    bug_key: str | None = None
    bug_files: tuple[str, ...] = ()
    fail_to_pass: list[str] = field(default_factory=list)
    runs: int = 0
    seconds: float = 0.0

    @property
    def valid(self) -> bool:
        return self.status in (VALID, REUSED)


@dataclass
class Event:
    """Progress report: one candidate finished (`outcome`), a phase message, or a note to keep (what was
    excluded, which tracer measured coverage, an import from outside the workspace)."""

    kind: str  # "phase" | "candidate" | "note"
    message: str = ""
    outcome: Outcome | None = None


@dataclass
class StrategyStats:
    tried: int = 0
    valid: int = 0
    kept: int = 0
    runs: int = 0
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"tried": self.tried, "valid": self.valid, "kept": self.kept, "runs": self.runs,
                "seconds": round(self.seconds, 3),
                "yield": round(self.valid / self.tried, 4) if self.tried else 0.0, "statuses": self.statuses}


@dataclass
class InjectedArtifact:
    id: str
    path: Path
    strategy: str
    operator: str
    target: str
    detail: str
    reused: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "path": str(self.path), "strategy": self.strategy, "operator": self.operator,
                "target": self.target, "detail": self.detail, "reused": self.reused}


@dataclass
class InjectResult:
    artifacts: list[InjectedArtifact]
    stats: dict[str, StrategyStats]
    runner: str
    n_tests: int
    seconds: float
    coverage_seconds: float
    requested: int
    notes: list[str] = field(default_factory=list)
    diagnosis: list[str] = field(default_factory=list)  # why nothing was written (empty when something was)
    tracer: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"artifacts": [a.to_dict() for a in self.artifacts], "requested": self.requested,
                "runner": self.runner, "tests": self.n_tests, "seconds": round(self.seconds, 3),
                "coverage_seconds": round(self.coverage_seconds, 3), "tracer": self.tracer,
                "notes": self.notes, "diagnosis": self.diagnosis,
                "strategies": {k: v.to_dict() for k, v in self.stats.items()}}


def parse_strategies(text: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    items = text.split(",") if isinstance(text, str) else list(text)
    out = []
    for item in items:
        item = item.strip().lower()
        if not item:
            continue
        if item not in STRATEGIES:
            raise SsrkitError(f"unknown strategy {item!r}; choose from {', '.join(STRATEGIES)}")
        if item not in out:
            out.append(item)
    if not out:
        raise SsrkitError("no strategy given")
    return tuple(out)


# -- the repository model ----------------------------------------------------------------------------

@dataclass
class _Module:
    path: str
    st: SourceText
    funcs: list[Function]
    covered: set[int]


class _Repo:
    """What every stream needs to know about the repository, computed once."""

    def __init__(self, sb: Sandbox, tm: TestMap, profile: Profile, settings: Settings, test_patterns: list[str]):
        self.tm = tm
        self.profile = profile
        self.settings = settings
        self.test_patterns = test_patterns
        self.passing = tm.passing() - set(profile.exclude_tests) - tm.doctests
        self.modules: dict[str, _Module] = {}
        # files that define test functions are tests even when no test pattern names them (a root `test.py`)
        defining = {tm.file_of(t) for t in tm.outcomes if t not in tm.doctests}
        for path in tm.code_files(test_patterns):
            if path in defining:
                continue
            try:
                text = sb.read_file(path).decode("utf-8")
                st = SourceText(text, path)
            except (FileNotFoundError, UnicodeDecodeError, SyntaxError, ValueError):
                continue
            self.modules[path] = _Module(path, st, functions(st), tm.covered_lines(path))
        # test files usable in a test script
        by_file: dict[str, list[str]] = {}
        for t in tm.outcomes:
            f = tm.file_of(t)
            if f:
                by_file.setdefault(f, []).append(t)
        self.tests_by_file = {f: sorted(ts) for f, ts in sorted(by_file.items())}
        self.usable_files = []
        self.excluded: dict[str, str] = {}  # test file -> why it is never selected
        self.slow: dict[str, float] = {}  # test file -> seconds its passing tests took under coverage
        failing = {t for t, st in tm.outcomes.items() if st not in (PASSED, "skipped") and t not in tm.doctests}
        for f, ts in self.tests_by_file.items():
            if not f.endswith(".py"):
                continue  # doctest text files (--doctest-glob): run by nothing ssrkit writes, never weakened
            ok = [t for t in ts if t in self.passing]
            if not ok:
                if any(t in failing for t in ts):
                    self.excluded[f] = "no test passes on the original code"
                continue
            if profile.runner == UNITTEST and len(ok) != len(ts):  # unittest cannot deselect single tests
                if any(t in failing for t in ts):
                    self.excluded[f] = "some of its tests fail on the original code"
                continue
            seconds = sum(tm.durations.get(t, 0.0) for t in ok)
            if seconds > settings.timeout:
                self.slow[f] = seconds
                continue
            self.usable_files.append(f)
        for f, why in tm.broken.items():
            self.excluded.setdefault(f, f"error at collection: {why}")
        self.failing = sorted(t for t in failing if self.tm.file_of(t) not in self.excluded and t not in tm.cut)
        self.cut = sorted(t for t in tm.cut if self.tm.file_of(t) not in self.excluded)
        self.flaky: set[str] = set()
        self._lock = threading.Lock()

    def notes(self) -> list[str]:
        """One line per kind of exclusion: test files and tests that fail on the original code."""
        out = []
        if self.excluded:
            verb = "fails or errors" if len(self.excluded) == 1 else "fail or error"
            out.append(f"excluded {_count(len(self.excluded), 'test file')} that {verb} on the original code: "
                       + _listing([f"{f} ({why})" for f, why in sorted(self.excluded.items())]))
        if self.slow:
            out.append(f"not selecting {_count(len(self.slow), 'test file')} whose tests took longer under coverage "
                       f"than one test run may ({self.settings.timeout:g}s, [validate] timeout): "
                       + _listing([f"{f} ({s:.0f}s)" for f, s in sorted(self.slow.items())]))
        if self.cut:
            out.append(f"excluded {_count(len(self.cut), 'test')} cut after {self.settings.timeout:g}s under coverage "
                       f"(longer than one test run may take, [validate] timeout): " + _listing(self.cut))
        if self.failing:
            verb = "fails" if len(self.failing) == 1 else "fail"
            out.append(f"excluded {_count(len(self.failing), 'test')} that {verb} on the original code: "
                       + _listing(self.failing))
        return out

    def exclude_flaky(self, tests: list[str]) -> list[str]:
        """Never select `tests` again (they passed in the coverage run, then failed on the original code)."""
        with self._lock:
            new = sorted(set(tests) & self.passing)
            if new:
                self.flaky.update(new)
                self.passing = self.passing - set(new)
            return new

    def select_tests(self, tests: set[str]) -> tuple[list[str], list[str], list[str]] | None:
        """(test files, deselected ids, expected passing ids) for a set of tests that must run."""
        files = {self.tm.file_of(t) for t in tests} & set(self.usable_files)
        if not files:
            return None

        def expected(fs: set[str]) -> list[str]:
            return [t for f in sorted(fs) for t in self.tests_by_file[f] if t in self.passing]

        for f in self.usable_files:  # reach min_passing_tests with more files, in a fixed order
            if len(expected(files)) >= self.settings.min_passing_tests:
                break
            files.add(f)
        if len(expected(files)) < self.settings.min_passing_tests:
            return None
        deselect = [t for f in sorted(files) for t in self.tests_by_file[f] if t not in self.passing]
        return sorted(files), deselect, expected(files)


def foreign_imports(sb: Sandbox, python: str) -> dict[str, str]:
    """Top-level packages of the repository that `python` imports from outside the workspace (name -> path)."""
    from importlib import resources

    roots = list(getattr(sb, "import_roots", None) or [sb.root])
    script = sb.scratch_path("ssrkit_imports.py")
    sb.write_file(script, resources.files("ssrkit.sandbox").joinpath("_imports.py").read_bytes())
    res = sb.run(" ".join(_q(a) for a in (python, script, *roots)), timeout=60)
    try:
        found = json.loads(res.output.strip().splitlines()[-1]) if res.ok and res.output.strip() else {}
    except (ValueError, IndexError):
        return {}
    root = sb.root.rstrip("/") + "/"
    real = os.path.realpath(sb.root).rstrip("/") + "/"
    return {n: w for n, w in found.items() if isinstance(w, str) and not w.startswith((root, real))}


# -- candidate streams -------------------------------------------------------------------------------

def _mutation_stream(repo: _Repo, family: str, rng: random.Random) -> Iterator[Candidate]:
    pool: dict[tuple[str, str], list[Mutation]] = {}
    for path, mod in sorted(repo.modules.items()):
        for func in mod.funcs:
            if not (set(func.body_lines) & mod.covered):
                continue
            muts = [m for m in mutations(mod.st, func, family) if m.line in mod.covered]
            if muts:
                pool[(path, func.qualname)] = muts
    keys = sorted(pool)
    seen: set[str] = set()
    index = 0
    while keys:
        key = rng.choice(keys)
        muts = pool[key]
        op = rng.choice(sorted({m.operator for m in muts}))
        m = rng.choice([m for m in muts if m.operator == op])
        muts.remove(m)
        if not muts:
            keys.remove(key)
        mod = repo.modules[key[0]]
        new = m.apply(mod.st.text)
        h = hashlib.sha256(f"{m.path}\0{new}".encode()).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        lines = {mod.st.line_of(e.start) for e in m.edits} | {m.line}
        tests = repo.tm.tests_covering(m.path, lines) & repo.passing
        if not tests:
            continue
        yield Candidate(family, index, m.operator, f"{m.path}::{m.function}", m.detail, line=m.line,
                        files={m.path: new}, prescreen_tests=sorted(tests))
        index += 1


def _changed_lines(old: str, new: str) -> set[int]:
    """Lines of `old` (1-based) that a change from `old` to `new` touches (insertions: the neighbours)."""
    out: set[int] = set()
    sm = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, _, _ in sm.get_opcodes():
        if tag == "equal":
            continue
        out.update(range(i1 + 1, i2 + 1) if i2 > i1 else (i1, i1 + 1))
    return out


def _history_stream(repo: _Repo, sb: Sandbox, commits: list[Commit], rng: random.Random) -> Iterator[Candidate]:
    order = recent_first([c for c in commits if c.code_lines <= MAX_CODE_LINES], rng)
    plans: list[tuple[Commit, tuple[str, ...]]] = [(c, c.code_files) for c in order]
    plans += [(c, (f,)) for c in order if len(c.code_files) > 1 for f in c.code_files]
    reverts: dict[tuple[str, str], Revert | None] = {}
    seen: set[str] = set()
    index = 0
    for commit, paths in plans:
        files: dict[str, str | None] = {}
        wholes: list[str] = []
        tests: set[str] = set()
        for path in paths:
            mod = repo.modules.get(path)
            if mod is None:
                continue  # not a covered code file any more
            key = (commit.sha, path)
            r = reverts.pop(key) if key in reverts else revert(sb, commit, path, mod.st.text)
            if len(paths) > 1:
                reverts[key] = r  # for this file's own plan, later
            if r is None:
                continue
            files[path] = r.text
            if r.whole:
                wholes.append(path)
            tests |= repo.tm.tests_covering(path, _changed_lines(mod.st.text, r.text))
            if not tests:
                tests |= repo.tm.tests_covering(path, mod.covered)
        tests &= repo.passing
        if not files or not tests:
            continue
        h = hashlib.sha256(repr(sorted(files.items())).encode()).hexdigest()
        if h in seen:
            continue
        seen.add(h)
        names = ", ".join(f + (" (whole file)" if f in wholes else "") for f in sorted(files))
        target = f"{commit.sha[:12]}:{','.join(sorted(files))}"
        detail = f"undo {commit.sha[:12]} ({commit.subject[:70]}) in {names}"
        yield Candidate(HISTORY, index, "history_revert", target, detail, files=files,
                        prescreen_tests=sorted(tests))
        index += 1


def _combine_stream(pool: list[Outcome], rng: random.Random) -> Iterator[Candidate]:
    pool = pool[:30]
    combos: dict[int, list[tuple[Outcome, ...]]] = {2: [], 3: []}
    for k in (2, 3):
        for combo in combinations(pool, k):
            files = [f for o in combo for f in o.bug_files]
            if len(files) == len(set(files)):
                combos[k].append(combo)
        rng.shuffle(combos[k])
    index = 0
    while combos[2] or combos[3]:
        k = 3 if combos[3] and (not combos[2] or rng.random() < 0.3) else 2
        combo = combos[k].pop()
        arts = [Artifact(o.artifact) for o in combo]  # type: ignore[arg-type]
        tests = sorted({t for o in combo for t in o.fail_to_pass})
        test_files = sorted({f for a in arts for f in a.test_files})
        ids = [o.artifact_id or "" for o in combo]
        yield Candidate(COMBINE, index, COMBINE, "+".join(ids),
                        "; ".join(o.candidate.detail for o in combo),
                        patches=[a.bug_diff for a in arts], prescreen_tests=tests, test_files=test_files,
                        components=ids)
        index += 1


@dataclass
class _Stream:
    strategy: str
    quota: int
    it: Iterator[Candidate] | None
    cap: int
    submitted: int = 0
    inflight: int = 0
    exhausted: bool = False
    results: dict[int, Outcome] = field(default_factory=dict)
    kept: list[Outcome] = field(default_factory=list)
    shard: Shard | None = None  # evaluate only the candidates of this shard (by stream index)

    def valid_count(self) -> int:
        return sum(1 for o in self.results.values() if o.valid)

    def needy(self) -> bool:
        return (not self.exhausted and self.it is not None and self.submitted < self.cap
                and self.valid_count() + self.inflight < self.quota)

    def next(self) -> Candidate | None:
        try:
            cand = next(self.it)  # type: ignore[arg-type]
            while self.shard is not None and not self.shard.owns_index(cand.index):
                cand = next(self.it)  # type: ignore[arg-type]
        except StopIteration:
            self.exhausted = True
            return None
        self.submitted += 1
        return cand

    def dry(self) -> bool:
        return self.exhausted or self.it is None or self.submitted >= self.cap


# -- the engine ----------------------------------------------------------------------------------------

class _SharedValidator(Validator):
    """Validates in the calling worker's sandbox (reset, never re-created) instead of opening new ones."""

    def __init__(self, settings: Settings, engine: "_Engine"):
        super().__init__(replace(settings, jobs=1))
        self._engine = engine

    @contextmanager
    def open(self, source: RepoSource):
        yield self._engine.sandbox()

    @contextmanager
    def slot(self):
        yield


class _Engine:
    def __init__(self, source: RepoSource, out: Path, *, seed: int, settings: Settings, config: Config,
                 opener: Callable[[RepoSource], Sandbox], on_event: Callable[[Event], None] | None):
        self.source = source
        self.out = out
        self.seed = seed
        self.settings = settings
        self.config = config
        self.opener = opener
        self.on_event = on_event or (lambda e: None)
        self._local = threading.local()
        self._sandboxes: list[Sandbox] = []
        self._lock = threading.Lock()
        self.fingerprint = ""
        self.base_commit: str | None = None
        self.staging = out / ".staging"
        self.existing: dict[str, tuple[Path, dict[str, Any]]] = {}
        self.validator = _SharedValidator(settings, self)
        self.repo: _Repo | None = None
        self.screen_timeout: float | None = None  # pre-screen and bug runs (validation keeps its own)
        self.last_messages: dict[str, str] = {}  # status -> the first discard message with it (diagnosis)

    # sandboxes: one per worker thread, prepared once, reset between candidates
    def sandbox(self) -> Sandbox:
        sb = getattr(self._local, "sb", None)
        if sb is None:
            sb = self.opener(self.source)
            with self._lock:
                self._sandboxes.append(sb)
            self._prepare(sb)
            self._local.sb = sb
        return sb

    def _prepare(self, sb: Sandbox) -> None:
        """Commit uncommitted work (so `git diff` shows only the bug) and remember that state as BASE."""
        res = sb.run("git status --porcelain --untracked-files=normal", timeout=60, env={"GIT_OPTIONAL_LOCKS": "0"})
        if res.ok and res.output.strip():
            res = sb.run("git add -A . && git -c user.name=ssrkit -c user.email=ssrkit@localhost "
                         "-c commit.gpgsign=false commit -q --no-verify -m 'ssrkit: inject base'", timeout=120)
            if not res.ok:
                raise SsrkitError(f"could not prepare the sandbox: {res.output.strip()[:300]}")
        sb.snapshot(BASE)

    def adopt(self, sb: Sandbox) -> None:
        """Close `sb` with the workers' sandboxes."""
        with self._lock:
            self._sandboxes.append(sb)

    def close(self) -> None:
        for sb in self._sandboxes:
            try:
                sb.close()
            except Exception:
                pass

    # -- one candidate -------------------------------------------------------------------------------
    def evaluate(self, cand: Candidate) -> Outcome:
        t0 = time.monotonic()
        try:
            out = self._evaluate(cand)
        except WeakenError as e:
            out = Outcome(cand, "unweakenable", str(e))
        except SsrkitError as e:
            out = Outcome(cand, "error", str(e))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            out = Outcome(cand, "error", f"{type(e).__name__}: {e}")
        out.seconds = time.monotonic() - t0
        return out

    def _write_bug(self, sb: Sandbox, cand: Candidate) -> str:
        sb.reset(BASE)
        for diff in cand.patches:
            sb.apply_patch(diff, label=BUG_DIFF)
        for path, text in sorted(cand.files.items()):
            if text is None:
                sb.run(f"rm -f -- {_q(path)}", timeout=30)
            else:
                sb.write_file(path, text)
        return sb.diff()

    def _evaluate(self, cand: Candidate) -> Outcome:
        repo = self.repo
        assert repo is not None
        sb = self.sandbox()
        timeout = self.screen_timeout or self.settings.timeout
        bug = self._write_bug(sb, cand)
        if not bug.strip():
            return Outcome(cand, "unchanged", "the edit changes nothing")
        key = hashlib.sha256(bug.encode()).hexdigest()
        bug_files = tuple(patches.touched_files(bug, BUG_DIFF))
        if key in self.existing:
            path, meta = self.existing[key]
            inj = meta.get("injector", {})
            if inj.get("seed") == self.seed and meta.get("strategy") == cand.strategy and \
                    inj.get("agent") == AGENT and (Artifact(path).validation or {}).get("valid"):
                v = Artifact(path).validation or {}
                return Outcome(cand, REUSED, "already in the output directory", artifact=path,
                               artifact_id=path.name, bug_key=key, bug_files=bug_files,
                               fail_to_pass=list(v.get("fail_to_pass", [])))
            return Outcome(cand, "duplicate", f"same bug as {path.name}", bug_key=key)

        # tests: what must run
        if cand.test_files:
            files = [f for f in cand.test_files if f in repo.usable_files]
            sel = repo.select_tests({t for f in files for t in repo.tests_by_file.get(f, [])})
        else:
            sel = repo.select_tests(set(cand.prescreen_tests))
        if sel is None:
            return Outcome(cand, "no_tests", f"fewer than {self.settings.min_passing_tests} passing tests cover it",
                           bug_key=key)
        test_files, deselect, expected = sel

        # pre-screen: only the covering tests, stop at the first failure
        runs = 1
        pre = sb.run(repo.profile.failfast_command(cand.prescreen_tests[:MAX_PRESCREEN_TESTS]), timeout=timeout)
        verdict = _prescreen_verdict(repo.profile.runner, pre)
        if verdict != "fails":
            return Outcome(cand, verdict, _tail(pre.output), bug_key=key, runs=runs)

        # which selected tests fail with the bug
        script = repo.profile.script(test_files, deselect)
        parser = repo.profile.parser()
        run = run_tests(sb, script, parser, timeout=timeout)
        runs += 1
        if run.timed_out:
            return Outcome(cand, "timeout", "the selected tests timed out with the bug", bug_key=key, runs=runs)
        failing = [t for t in expected if run.statuses.get(t) != PASSED]
        if not failing:
            return Outcome(cand, "harmless", "no selected test fails", bug_key=key, runs=runs)
        if len(failing) == len(expected):
            return Outcome(cand, "total_break", "every selected test fails", bug_key=key, runs=runs)

        # weaken: remove exactly the failing test functions
        by_file: dict[str, list] = {}
        for t in failing:
            loc = locate_test(t, repo.profile.runner, repo.tm.test_files, test_files)
            if loc is not None and loc.classes:
                loc = relocate(loc, lambda f: sb.read_file(f).decode("utf-8"), repo.tests_by_file)
            if loc is None or loc.file not in test_files:
                where = f" (defined in {loc.file}, not a selected test file)" if loc is not None else ""
                return Outcome(cand, "unweakenable", f"cannot locate the test {t}{where}", bug_key=key, runs=runs)
            if not loc.file.endswith(".py"):
                return Outcome(cand, "unweakenable", f"the failing test {t} is in {loc.file}, not a Python "
                                                     f"test module; skipped", bug_key=key, runs=runs)
            by_file.setdefault(loc.file, []).append(loc)
        sb.reset(BASE)
        for f, locs in sorted(by_file.items()):
            text = sb.read_file(f).decode("utf-8")
            sb.write_file(f, remove_tests(text, locs, f))
        weaken = sb.diff()

        # the artifact, validated in this sandbox
        staging = self.staging / f"{cand.strategy}-{cand.index:05d}"
        if staging.exists():
            shutil.rmtree(staging)
        meta = Metadata(repo=self.source, base_commit=self.base_commit, strategy=cand.strategy, order=1,
                        injector=cand.injector(self.seed))
        art = create_artifact(staging, bug_diff=bug, weaken_diff=weaken, test_script=script,
                              test_files=test_files, test_parser=parser, metadata=meta)
        known = {"bug": run}  # validation's bug_breaks run: the same state, already run
        report = self.validator.validate(art, self.source, known=known)
        write_report(art, report)
        runs += sum(1 for name in report.runs if name not in known) - report.original_cached
        if not report.valid:
            first = report.first_failure
            if first is not None and first.name == "original_passes":
                statuses = report.runs.get("original", {}).get("statuses", {})
                flaky = repo.exclude_flaky([t for t, st in statuses.items() if st != PASSED])
                if flaky:
                    self.on_event(Event("note", f"excluded {_count(len(flaky), 'test')} that passed under coverage "
                                                f"but failed on the original code (flaky): {_listing(flaky)}"))
            return Outcome(cand, "invalid", f"{first.name}: {first.message}" if first else "invalid",
                           artifact=staging, artifact_id=art.id, bug_key=key, runs=runs)
        return Outcome(cand, VALID, f"{len(report.fail_to_pass)} FAIL_TO_PASS", artifact=staging,
                       artifact_id=art.id, bug_key=key, bug_files=bug_files,
                       fail_to_pass=list(report.fail_to_pass), runs=runs)

    # -- scheduling ----------------------------------------------------------------------------------
    def run_streams(self, streams: list[_Stream], pool: Executor, jobs: int) -> None:
        """Evaluate candidates until every stream has its quota of valid ones or runs dry."""
        inflight: dict[Future, _Stream] = {}
        rr = 0
        while True:
            while len(inflight) < jobs:
                needy = [s for s in streams if s.needy()]
                if not needy:
                    break
                s = needy[rr % len(needy)]
                rr += 1
                cand = s.next()
                if cand is None:
                    continue
                s.inflight += 1
                inflight[pool.submit(self.evaluate, cand)] = s
            if not inflight:
                return
            done, _ = wait(list(inflight), return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: (inflight[f].strategy,)):
                s = inflight.pop(fut)
                s.inflight -= 1
                outcome = fut.result()
                s.results[outcome.candidate.index] = outcome
                if outcome.message:
                    self.last_messages.setdefault(outcome.status, outcome.message)
                self.on_event(Event("candidate", outcome.message, outcome))


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _listing(items: list[str], shown: int = 5) -> str:
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)


def _tail(text: str, n: int = 300) -> str:
    text = text.strip()
    return text[-n:]


def _prescreen_verdict(runner: str, res) -> str:
    if res.timed_out:
        return "timeout"
    if res.exit_code == 0:
        return "harmless"
    if runner == PYTEST:
        return "fails" if res.exit_code == 1 else "import_error"
    if res.exit_code == 1 and "unittest.loader._FailedTest" not in res.output and \
            "unittest.loader.ModuleImportFailure" not in res.output:
        return "fails"
    return "import_error"


def _quotas(n: int, strategies: tuple[str, ...]) -> dict[str, int]:
    base, extra = divmod(n, len(strategies))
    return {s: base + (1 if i < extra else 0) for i, s in enumerate(strategies)}


def _scan_existing(out: Path) -> dict[str, tuple[Path, dict[str, Any]]]:
    """Artifacts already in the output directory, by the hash of their bug diff."""
    import tomllib

    found: dict[str, tuple[Path, dict[str, Any]]] = {}
    if not out.is_dir():
        return found
    for d in sorted(out.iterdir()):
        bug = d / BUG_DIFF
        if d.name.startswith(".") or not bug.is_file():
            continue
        try:
            meta = tomllib.loads((d / METADATA).read_text(encoding="utf-8")) if (d / METADATA).is_file() else {}
        except (OSError, ValueError):
            meta = {}
        found.setdefault(hashlib.sha256(bug.read_bytes()).hexdigest(), (d, meta))
    return found


class Session:
    """One repository prepared for injection: runner profile, per-test coverage map, worker sandboxes.

    `inject()` drives it; tests and benchmarks may evaluate hand-made candidates with `evaluate`.
    Use as a context manager (closes every sandbox and drops the staging directory).
    """

    def __init__(self, repo: RepoSource | str | Path, out: str | Path, *, seed: int = 0,
                 config: Config | None = None, settings: Settings | None = None, backend: str | None = None,
                 options: SandboxOptions | None = None, cache: bool = True,
                 on_event: Callable[[Event], None] | None = None,
                 sandbox_factory: Callable[[RepoSource], Sandbox] | None = None):
        self.source = repo if isinstance(repo, RepoSource) else RepoSource.local(repo)
        if config is None:
            config = load_config(None, Path(self.source.path) if self.source.kind == "local" else None)
        self.config = config
        self.settings = settings or Settings.from_section(config.section("validate"))
        self.section = config.section("inject")
        self.test_patterns = list(config.get("validate", "test_patterns") or self.settings.test_patterns)
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.seed = seed
        self.cache = cache
        self.notes: list[str] = []
        user_event = on_event or (lambda e: None)

        def emit(e: Event) -> None:
            if e.kind == "note":
                self.notes.append(e.message)
            user_event(e)

        self.emit = on_event = emit
        self.foreign: dict[str, str] = {}  # package under test -> where the tests import it from, if elsewhere
        if sandbox_factory is None:
            be = backend or config.get("sandbox", "backend", "auto")
            opts = options or SandboxOptions()

            def sandbox_factory(src: RepoSource) -> Sandbox:
                return open_sandbox(src, be, opts)

        self.engine = _Engine(self.source, self.out, seed=seed, settings=self.settings, config=config,
                              opener=sandbox_factory, on_event=on_event)
        self.engine.existing = _scan_existing(self.out)
        self.setup_sandbox: Sandbox | None = None
        self.profile: Profile | None = None
        self.testmap: TestMap | None = None
        self.commits: list[Commit] = []

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.engine.close()
        shutil.rmtree(self.engine.staging, ignore_errors=True)

    @property
    def repo(self) -> _Repo:
        assert self.engine.repo is not None, "call setup() first"
        return self.engine.repo

    def setup(self, *, history: bool = True) -> None:
        """Detect the runner, map per-test coverage (cached), read the code and the history."""
        sb = self.engine.opener(self.source)
        self.engine.adopt(sb)
        self.setup_sandbox = sb
        self.emit(Event("phase", "detecting the test runner"))
        from .runner import list_python_files

        self.profile = load_profile(sb, self.section, list_python_files(sb))
        self.engine.fingerprint = repo_fingerprint(sb)
        head = sb.run("git rev-parse HEAD", timeout=60)
        self.engine.base_commit = head.output.strip() if head.ok and head.output.strip() else None
        self.emit(Event("phase", f"mapping per-test coverage ({self.profile.runner})"))
        cov_timeout = float(self.section.get("coverage_timeout") or COVERAGE_TIMEOUT)
        self.testmap = build_testmap(sb, self.profile.full_command(), python=self.profile.python,
                                     timeout=cov_timeout, test_limit=self.settings.timeout,
                                     fingerprint=self.engine.fingerprint, cache=self.cache)
        self.engine.repo = _Repo(sb, self.testmap, self.profile, self.settings, self.test_patterns)
        if not self.testmap.complete:
            self.emit(Event("note", f"the suite did not finish within its coverage timeout "
                                    f"({cov_timeout:g}s); using the "
                                    f"{len(self.testmap.outcomes)} tests that ran (raise [inject] coverage_timeout "
                                    f"for the rest)"))
        for line in self.engine.repo.notes():
            self.emit(Event("note", line))
        if self.testmap.tracer:
            self.emit(Event("note", f"per-test coverage measured by {self.testmap.tracer}"))
        self.foreign = foreign_imports(sb, self.profile.python)
        for name, where in sorted(self.foreign.items()):
            self.emit(Event("note", f"the tests import {name} from {where}, not from the workspace"))
        # a mutant may loop forever: screening runs get a few times the whole suite's duration
        auto = max(MIN_SCREEN_TIMEOUT, SCREEN_TIMEOUT_FACTOR * self.testmap.seconds)
        self.engine.screen_timeout = min(self.settings.timeout, float(self.section.get("screen_timeout") or auto))
        if history:
            self.commits = list_commits(sb, self.test_patterns, rev=self.engine.base_commit or "HEAD")

    def stream(self, strategy: str, pool: list[Outcome] | None = None) -> Iterator[Candidate]:
        """The seeded candidate stream of one strategy (`combine` needs the pool of valid outcomes)."""
        rng = random.Random(f"ssrkit:{self.seed}:{strategy}")
        if strategy in (EXPRESSION, REMOVAL):
            return _mutation_stream(self.repo, strategy, rng)
        if strategy == HISTORY:
            assert self.setup_sandbox is not None
            return _history_stream(self.repo, self.setup_sandbox, self.commits, rng)
        if strategy == COMBINE:
            return _combine_stream(pool or [], rng)
        raise SsrkitError(f"unknown strategy {strategy!r}")

    def diagnose(self, stats: dict[str, StrategyStats]) -> list[str]:
        """Why a run wrote nothing: the stage that ran dry, its top reasons, the setting that would change it."""
        repo = self.repo
        lines: list[str] = []
        foreign = "; ".join(f"{n} is imported from {w}" for n, w in sorted(self.foreign.items()))
        if not repo.passing:
            lines.append(f"no test passes on the original code ({len(repo.tm.outcomes)} ran; "
                         f"{_listing(repo.notes()) or 'see the test output'})")
            lines.append("setting: [inject] python or test_command in ssrkit.toml, or run ssrkit with the "
                         "virtualenv activated in which the repository's tests pass")
            return lines
        covered = {p: m for p, m in repo.modules.items() if m.covered}
        if not covered:
            measured = [p for p in repo.tm.files if p.endswith(".py")]
            lines.append(f"no covered function: the {len(repo.passing)} passing tests execute no code file of "
                         f"the repository outside the test patterns ({len(measured)} measured file(s)"
                         + (f": {_listing(measured, 3)}" if measured else "") + ")")
            if foreign:
                lines.append(f"the package under test is not the workspace's: {foreign}")
                lines.append("setting: install the repository itself into that environment (pip install -e .), or "
                             "[sandbox] env = {PYTHONPATH = \"<dir holding the package>\"} in ssrkit.toml")
            else:
                lines.append("setting: [validate] test_patterns in ssrkit.toml (the code may lie under a "
                             "directory a test pattern names)")
            return lines
        tried = sum(st.tried for st in stats.values())
        if not tried:
            lines.append(f"no candidate: {len(covered)} covered module(s), but no operator applies to a line "
                         "that a passing test executes" + (" and the history has no revertable commit"
                                                            if HISTORY in stats else ""))
            lines.append("setting: --strategy expression,removal,history (all strategies), or more tests in "
                         "[inject] args")
            return lines
        counts: dict[str, int] = {}
        for st in stats.values():
            for k, v in st.statuses.items():
                counts[k] = counts.get(k, 0) + v
        top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        lines.append(f"every one of the {tried} candidate(s) was discarded: "
                     + ", ".join(f"{k} {v}" for k, v in top))
        example = self.last_messages.get(top[0][0]) if top else None
        if example:
            lines.append(f"e.g. {top[0][0]}: {_tail(example, 240)}")
        if foreign:
            lines.append(f"the package under test is not the workspace's: {foreign}")
        lines.append("setting: " + _HINTS.get(top[0][0] if top else "", "--max-tries (more candidates per strategy)"))
        return lines

    @property
    def last_messages(self) -> dict[str, str]:
        return self.engine.last_messages

    def evaluate(self, cand: Candidate) -> Outcome:
        """Pre-screen, weaken, write and validate one candidate (in this thread's worker sandbox)."""
        return self.engine.evaluate(cand)

    def run(self, n: int, *, jobs: int = 1, strategies: tuple[str, ...] = STRATEGIES,
            max_tries: int | None = None, shard: Shard | None = None,
            ) -> tuple[list[InjectedArtifact], dict[str, StrategyStats]]:
        """`n` valid artifacts; with `shard` K/N, only from the candidates of that shard (stream index
        mod N = K−1), so N shards evaluate disjoint candidates (give each its share of the round's n)."""
        strategies = parse_strategies(strategies)
        quotas = _quotas(n, strategies)

        def cap(q: int) -> int:
            return max_tries if max_tries is not None else 20 * q + 20

        streams = {s: _Stream(s, quotas[s], self.stream(s) if s != COMBINE else None, cap(quotas[s]), shard=shard)
                   for s in strategies}
        base_streams = [streams[s] for s in strategies if s != COMBINE]
        self.emit(Event("phase", f"injecting {n} bug(s): {', '.join(f'{s} {quotas[s]}' for s in strategies)}"))
        with LocalExecutor(jobs) as pool:
            _settle(self.engine, base_streams, pool, jobs)
            comb = streams.get(COMBINE)
            if comb is not None and comb.quota > 0:
                comb.it = self.stream(COMBINE, [o for s in base_streams for o in s.kept])
                _settle(self.engine, [comb], pool, jobs)
                deficit = comb.quota - len(comb.kept)
                if deficit > 0:
                    comb.quota = len(comb.kept)
                    if _redistribute(base_streams, deficit):
                        _settle(self.engine, base_streams, pool, jobs)
        artifacts = _finalize(self.engine, [streams[s] for s in strategies], self.out)
        stats = {}
        for s in strategies:
            st = StrategyStats()
            for o in streams[s].results.values():
                st.tried += 1
                st.valid += o.valid
                st.runs += o.runs
                st.seconds += o.seconds
                st.statuses[o.status] = st.statuses.get(o.status, 0) + 1
            st.kept = len(streams[s].kept)
            stats[s] = st
        return artifacts, stats


def inject(
    repo: RepoSource | str | Path,
    out: str | Path,
    *,
    n: int = 10,
    jobs: int = 1,
    seed: int = 0,
    strategies: str | tuple[str, ...] | list[str] = STRATEGIES,
    config: Config | None = None,
    backend: str | None = None,
    options: SandboxOptions | None = None,
    settings: Settings | None = None,
    max_tries: int | None = None,
    cache: bool = True,
    on_event: Callable[[Event], None] | None = None,
    sandbox_factory: Callable[[RepoSource], Sandbox] | None = None,
    shard: Shard | None = None,
) -> InjectResult:
    """Inject `n` valid bugs into a repository; write each as `out/<id>/` with its validation.json.

    `repo` is a RepoSource or a local path. The `[inject]` section of the configuration (the repository's
    ssrkit.toml, then the user's) gives the test runner profile; `[validate]` the thresholds and the
    per-run timeout. Strategies share `n` evenly (in the order given); one that runs dry passes its share
    on. `sandbox_factory` replaces `open_sandbox(source, backend, options)`.
    """
    started = time.monotonic()
    if n < 1:
        raise SsrkitError("--n must be at least 1")
    if jobs < 1:
        raise SsrkitError("--jobs must be at least 1")
    strategies = parse_strategies(strategies)
    with Session(repo, out, seed=seed, config=config, settings=settings, backend=backend, options=options,
                 cache=cache, on_event=on_event, sandbox_factory=sandbox_factory) as session:
        session.setup(history=HISTORY in strategies)
        artifacts, stats = session.run(n, jobs=jobs, strategies=strategies, max_tries=max_tries, shard=shard)
        try:
            session.config.write(session.out / "inject-config.toml")
        except OSError:
            pass
        assert session.profile is not None and session.testmap is not None
        return InjectResult(artifacts, stats, session.profile.runner, len(session.testmap.outcomes),
                            time.monotonic() - started, session.testmap.seconds, n, notes=list(session.notes),
                            diagnosis=[] if artifacts else session.diagnose(stats), tracer=session.testmap.tracer)


def _redistribute(streams: list[_Stream], deficit: int) -> bool:
    """Give `deficit` more artifacts to the streams that can still produce; False if none can."""
    live = [s for s in streams if not s.dry()]
    if not live:
        return False
    for i in range(deficit):
        live[i % len(live)].quota += 1
    return True


def _settle(engine: _Engine, streams: list[_Stream], pool: Executor, jobs: int) -> None:
    """Run streams to their quotas; pass the share of a stream that runs dry on; drop duplicate bugs."""
    while True:
        engine.run_streams(streams, pool, jobs)
        seen: set[str] = set()
        deficit = 0
        for s in streams:
            s.kept = []
            for i in sorted(s.results):
                o = s.results[i]
                if not o.valid:
                    continue
                if o.bug_key in seen:
                    o.status, o.message = "duplicate", "same bug as an artifact of another strategy"
                    continue
                if len(s.kept) < s.quota:
                    s.kept.append(o)
            seen.update(o.bug_key for o in s.kept if o.bug_key)
            if len(s.kept) < s.quota and s.dry():
                deficit += s.quota - len(s.kept)
                s.quota = len(s.kept)
        if any(len(s.kept) < s.quota and not s.dry() for s in streams):
            continue  # a duplicate was dropped: that stream needs another one
        if deficit and _redistribute(streams, deficit):
            continue
        return


def _finalize(engine: _Engine, streams: list[_Stream], out: Path) -> list[InjectedArtifact]:
    """Move kept artifacts from staging to out/<id>; everything else in staging is dropped."""
    result = []
    for s in streams:
        for o in s.kept:
            c = o.candidate
            if o.status == REUSED:
                dest = o.artifact
            else:
                dest = out / (o.artifact_id or "")
                if dest.exists():
                    shutil.rmtree(dest)
                shutil.move(str(o.artifact), str(dest))
                art = Artifact(dest)
                v = art.validation
                if v is not None:
                    v["artifact"] = str(dest)
                    atomic_write_json(dest / VALIDATION, v)
            result.append(InjectedArtifact(o.artifact_id or dest.name, dest, c.strategy, c.operator, c.target,
                                           c.detail, reused=o.status == REUSED))
    return result
