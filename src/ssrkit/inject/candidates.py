"""Candidate generation for the procedural injector: what a candidate is, what became of it, the
repository as every stream sees it, and the seeded candidate streams (SPEC §4).

`expression` and `removal` pick a covered function, an operator, then a site on a covered line; `history`
undoes, in today's code, past commits that changed code and tests; `combine` merges 2–3 valid bugs of this
run that touch different files. Each stream is driven by its own seeded RNG, so the same seed gives the same
candidates in the same order. Nothing here runs a test: see `evaluate` (one candidate) and `procedural`
(scheduling).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import math
import random
import threading
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..store.artifact import Artifact
from ..errors import SsrkitError
from ..sandbox import Sandbox
from ..testrun import PASSED
from ..validate import Settings
from .history import MAX_CODE_LINES, Commit, Revert, recent_first, revert
from ..mutation.operators import EXPRESSION, REMOVAL, Function, Mutation, functions, mutated, mutations
from .runner import UNITTEST, Profile
from ..mutation.source_text import SourceText
from ..mutation.coverage import TestMap, per_test_limit

HISTORY = "history"
COMBINE = "combine"
STRATEGIES = (EXPRESSION, REMOVAL, HISTORY, COMBINE)
#: `injector.agent` in the artifacts this injector writes
AGENT = "procedural"

# outcome statuses
VALID, REUSED = "valid", "reused"
DISCARDS = ("unchanged", "duplicate", "no_tests", "harmless", "import_error", "timeout", "total_break",
            "unweakenable", "invalid", "error")


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
    #: tests that failed on the original code in this candidate's validation although they passed under
    #: coverage (flaky): the scheduler stops selecting them (`RepoView.exclude_flaky`)
    flaky: list[str] = field(default_factory=list)

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


class RepoView:
    """What every stream needs to know about the repository, computed once."""

    def __init__(self, sb: Sandbox, tm: TestMap, profile: Profile, settings: Settings, test_patterns: list[str]):
        self.tm = tm
        self.profile = profile
        self.settings = settings
        self.test_patterns = test_patterns
        self.passing = tm.passing() - set(profile.exclude_tests) - tm.doctests
        self.modules: dict[str, _Module] = {}
        #: files that define test functions: tests even when no test pattern names them (a root `test.py`)
        self.test_files = frozenset(f for f in (tm.file_of(t) for t in tm.outcomes if t not in tm.doctests) if f)
        for path in tm.code_files(test_patterns):
            if path in self.test_files:
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
        #: usable test file -> seconds its passing tests took under coverage (what a run of it costs)
        self.file_seconds: dict[str, float] = {}
        #: seconds of the coverage run that no test took (start-up, collection): what any run adds to its tests
        self.overhead = max(0.0, tm.seconds - sum(tm.durations.values()))
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
            self.file_seconds[f] = seconds
        for f, why in tm.broken.items():
            self.excluded.setdefault(f, f"error at collection: {why}")
        self.failing = sorted(t for t in failing if self.tm.file_of(t) not in self.excluded and t not in tm.cut)
        self.cut = sorted(t for t in tm.cut if self.tm.file_of(t) not in self.excluded)
        self.flaky: set[str] = set()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def for_evaluation(self) -> "RepoView":
        """A copy with what evaluating a candidate reads (test selection, runner profile), without the
        modules' source texts that only the streams need: what travels to another machine."""
        view = copy.copy(self)
        view.modules = {}
        view._lock = threading.Lock()
        return view

    def notes(self) -> list[str]:
        """One line per kind of exclusion: test files and tests that fail on the original code."""
        out = []
        if self.excluded:
            verb = "fails or errors" if len(self.excluded) == 1 else "fail or error"
            out.append(f"excluded {plural(len(self.excluded), 'test file')} that {verb} on the original code: "
                       + listing([f"{f} ({why})" for f, why in sorted(self.excluded.items())]))
        if self.slow:
            out.append(f"not selecting {plural(len(self.slow), 'test file')} whose tests took longer under coverage "
                       f"than one test run may ({self.settings.timeout:g}s, [validate] timeout): "
                       + listing([f"{f} ({'cut at ' if f in self.tm.files_cut else ''}{s:.0f}s)"
                                  for f, s in sorted(self.slow.items())]))
        if self.cut:
            out.append(f"excluded {plural(len(self.cut), 'test')} cut after "
                       f"{per_test_limit(self.settings.timeout):g}s under coverage (a third of one test run's "
                       f"budget, [validate] timeout {self.settings.timeout:g}s): " + listing(self.cut))
        if self.failing:
            verb = "fails" if len(self.failing) == 1 else "fail"
            out.append(f"excluded {plural(len(self.failing), 'test')} that {verb} on the original code: "
                       + listing(self.failing))
        return out

    def seconds(self, tests: Iterable[str]) -> float:
        """What a run of `tests` may take, from the coverage run: their durations plus its overhead."""
        return self.overhead + sum(self.tm.durations.get(t, 0.0) for t in tests)

    def exclude_flaky(self, tests: list[str]) -> list[str]:
        """Never select `tests` again (they passed in the coverage run, then failed on the original code)."""
        with self._lock:
            new = sorted(set(tests) & self.passing)
            if new:
                self.flaky.update(new)
                self.passing = self.passing - set(new)
            return new

    def select_tests(self, tests: set[str],
                     avoid: set[str] = frozenset()) -> tuple[list[str], list[str], list[str]] | None:
        """(test files, deselected ids, expected passing ids) for a set of tests that must run; files in `avoid`
        are never added to reach min_passing_tests."""
        files = {self.tm.file_of(t) for t in tests} & set(self.usable_files)
        if not files:
            return None

        def expected(fs: set[str]) -> list[str]:
            return [t for f in sorted(fs) for t in self.tests_by_file[f] if t in self.passing]

        # reach min_passing_tests with more files: the cheapest first (each run of the artifact runs them)
        for f in sorted(self.usable_files, key=lambda f: (cost_rank(self.file_seconds.get(f, 0.0)), f)):
            if len(expected(files)) >= self.settings.min_passing_tests:
                break
            if f not in avoid:
                files.add(f)
        if len(expected(files)) < self.settings.min_passing_tests:
            return None
        deselect = [t for f in sorted(files) for t in self.tests_by_file[f] if t not in self.passing]
        return sorted(files), deselect, expected(files)


def cost_rank(seconds: float) -> int:
    """A coarse rank of what running something costs (ranks are factors of 4 apart): choices made by it come
    out the same when the coverage map is made again and its durations move a little, so a seed keeps its
    artifacts; it still tells a 30-second test file from a 1-second one."""
    return 0 if seconds < 0.05 else 1 + int(math.log(seconds / 0.05, 4))


# -- candidate streams -------------------------------------------------------------------------------

def stream(strategy: str, *, seed: int, repo: RepoView, sandbox: Sandbox | None = None,
           commits: list[Commit] | None = None, pool: list[Outcome] | None = None) -> Iterator[Candidate]:
    """The seeded candidate stream of one strategy. `history` reads past commits in `sandbox`; `combine`
    merges valid outcomes of this run (`pool`)."""
    rng = random.Random(f"ssrkit:{seed}:{strategy}")
    if strategy in (EXPRESSION, REMOVAL):
        return _mutation_stream(repo, strategy, rng)
    if strategy == HISTORY:
        assert sandbox is not None, "the history stream reads commits in a sandbox"
        return _history_stream(repo, sandbox, commits or [], rng)
    if strategy == COMBINE:
        return _combine_stream(pool or [], rng)
    raise SsrkitError(f"unknown strategy {strategy!r}")


def _mutation_stream(repo: RepoView, family: str, rng: random.Random) -> Iterator[Candidate]:
    pool: dict[tuple[str, str], list[Mutation]] = {}
    for path, mod in sorted(repo.modules.items()):
        for func in mod.funcs:
            if not (set(func.body_lines) & mod.covered):
                continue
            muts = [m for m in mutations(mod.st, func, family, checked=False) if m.line in mod.covered]
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
        new = mutated(mod.st, m)  # checked on draw: a parse of the module per mutation drawn, not per mutation
        if new is None:
            continue
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


def _history_stream(repo: RepoView, sb: Sandbox, commits: list[Commit], rng: random.Random) -> Iterator[Candidate]:
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


# -- wording shared by notes, discard messages and the diagnosis ----------------------------------------

def plural(n: int, word: str) -> str:
    """"3 tests", "1 test"."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def listing(items: list[str], shown: int = 5) -> str:
    """The first `shown` items, comma-separated, then how many more."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(items[:shown]) + more


def tail(text: str, n: int = 300) -> str:
    """The last `n` characters of `text`, stripped (where a test log says what went wrong)."""
    text = text.strip()
    return text[-n:]


