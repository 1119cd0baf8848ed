"""One candidate of the procedural injector, evaluated in a worker's sandbox (SPEC §4).

Each worker thread has one sandbox, prepared once (uncommitted work committed, that state snapshotted as
`BASE`) and reset between candidates, never re-created. Per candidate: write the bug and take `git diff`;
pre-screen by running only the selected tests that cover the mutated lines, cheapest first, with fail-fast
(nothing fails, or the tests do not even import ⇒ discard). A mutation's pre-screen starts with a smoke run
of a few tests: the cheapest selected tests that do not run the changed lines, then one covering test per
other file; when every one fails the bug breaks everything (`total_break`), known in seconds rather than
after a run of every selected test. Covering tests with no definition in their file to remove (generated at
run time) run next, those of files that also have a removable covering test (only such a file can become the
artifact's): one failing spoils its file; when no covering test has a definition, no test runs at all. The
artifact's test files are the file of the first removable covering test that failed in an unspoiled file
(with the cheapest unspoiled files that bring the passing tests to `min_passing_tests`), not every file some
covering test is in: each later run costs that file; `unweakenable` when there is none (a history revert runs
all its files: any failing test without a definition makes it so). Then run the selected test files to find
the failing tests; remove exactly those test functions (`test_weaken.diff`); write the artifact into the
staging directory and validate it with `ssrkit.validate` in the same sandbox, handing over the bug run just made.
Each screening run's timeout comes from what its tests took under coverage (`Evaluator.run_timeout`).
Under a portable executor (Ray) each candidate is instead a unit with one fresh sandbox on whichever node
runs it (`candidate_unit`, below). Which candidates are evaluated, which valid ones are kept, and which
tests found flaky (`Outcome.flaky`) are no longer selected is `procedural`'s business.
"""

from __future__ import annotations

import ast
import hashlib
import shlex
import shutil
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from .. import patch as patches
from ..store.artifact import BUG_DIFF, Metadata, create_artifact
from ..errors import SsrkitError
from ..executor import ArtifactRef, Scratch, SourceRef, read_tree, relabel
from ..sandbox import Sandbox, SandboxOptions
from ..sandbox import timeouts
from ..sandbox.git import GIT_IDENTITY
from ..store.source import RepoSource
from ..testrun import PASSED, SKIPPED, run_parser, run_tests
from ..verdict import pyast
from ..executor.units import path_mapping, relabel_bytes
from ..validate import Settings, Validator, write_report
from .candidates import AGENT, REUSED, VALID, Candidate, Outcome, RepoView, cost_rank, listing, tail
from .runner import PYTEST, locate_test
from .weaken import WeakenError, relocate, remove_tests, removable

#: the snapshot of a worker's sandbox that every candidate starts from
BASE = "inject-base"
MAX_PRESCREEN_TESTS = 200
#: tests a mutation's pre-screen runs first: when every one of them fails, the bug breaks everything
SMOKE_TESTS = 3
#: a screening run may take this many times what its tests took under coverage, plus that run's overhead ...
RUN_TIMEOUT_FACTOR = 3.0
MIN_RUN_TIMEOUT = 10.0  # ... and never less than this (seconds): a start-up on a loaded machine


@dataclass
class Existing:
    """An artifact already in the output directory, read once when the run starts: a candidate with the
    same bug is reused (same seed and strategy, valid) or a duplicate. `staged`: a valid artifact that an
    interrupted run of this seed left in the staging directory: reused by the same candidate, else ignored
    (an uninterrupted run would not have it)."""

    path: Path
    metadata: Metadata  # artifact.toml
    validation: dict[str, Any] | None
    staged: bool = False
    id: str = ""  # the artifact's id (a staged one's directory is named after its candidate)


def staging_name(cand: Candidate) -> str:
    """The directory in staging where `cand`'s artifact is written and validated."""
    return f"{cand.strategy}-{cand.index:05d}"


class _SharedValidator(Validator):
    """Validates in the calling worker's sandbox (reset, never re-created) instead of opening new ones."""

    def __init__(self, settings: Settings, evaluator: "Evaluator"):
        super().__init__(replace(settings, jobs=1))
        self._evaluator = evaluator

    @contextmanager
    def open(self, source: RepoSource):
        yield self._evaluator.sandbox()

    @contextmanager
    def slot(self):
        yield


class Evaluator:
    """Evaluates candidates of one repository, each in the calling thread's worker sandbox.

    `repo`, `base_commit` and `screen_timeout` are filled in once the repository is mapped (`Session.setup`);
    `existing` holds the artifacts already in the output directory, by the hash of their bug diff."""

    def __init__(self, source: RepoSource, staging: Path, *, seed: int, settings: Settings,
                 opener: Callable[[RepoSource], Sandbox], label: RepoSource | None = None):
        self.source = source
        self.label = label or source  # the repository as artifact.toml names it (the driver's, on a node)
        self.staging = staging
        self.seed = seed
        self.settings = settings
        self.opener = opener
        self._local = threading.local()
        self._sandboxes: list[Sandbox] = []
        self._lock = threading.Lock()
        self.base_commit: str | None = None
        self.existing: dict[str, Existing] = {}
        self.validator = _SharedValidator(settings, self)
        self.repo: RepoView | None = None
        self.screen_timeout: float | None = None  # pre-screen and bug runs (validation keeps its own)
        #: each screening run's timeout comes from what its tests took under coverage, `screen_timeout` at most
        #: (False: `screen_timeout` itself, as [inject] screen_timeout sets it)
        self.estimate_timeouts = False
        self._trees: dict[str, ast.Module | None] = {}  # test file -> its module (None: not Python)
        self._smoke: dict[tuple[str, ...], bool] = {}  # smoke tests -> they pass on the original code

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
        res = sb.run("git status --porcelain --untracked-files=normal", timeout=timeouts.FEW_FILES,
                     env={"GIT_OPTIONAL_LOCKS": "0"})
        if res.ok and res.output.strip():
            res = sb.run(f"git add -A . && git {GIT_IDENTITY} commit -q --no-verify -m 'ssrkit: inject base'",
                         timeout=timeouts.WHOLE_TREE)
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
        """Pre-screen, weaken, write and validate `cand`; what became of it (never raises for a bad candidate)."""
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
                sb.run(f"rm -f -- {shlex.quote(path)}", timeout=timeouts.ONE_PATH)
            else:
                sb.write_file(path, text)
        return sb.diff()

    def _existing(self, cand: Candidate, key: str, bug_files: tuple[str, ...]) -> Outcome | None:
        """A bug already in the output directory: reused when this seed and strategy made it valid there.
        One staged by an interrupted run: reused by the same candidate, else None (evaluate it)."""
        found = self.existing[key]
        path, meta, v = found.path, found.metadata, found.validation or {}
        inj = meta.injector
        if found.staged:
            if path.name != staging_name(cand):
                return None
            return Outcome(cand, REUSED, "validated by an interrupted run", artifact=path,
                           artifact_id=found.id, bug_key=key, bug_files=bug_files,
                           fail_to_pass=list(v.get("fail_to_pass", [])))
        if inj.get("seed") == self.seed and meta.strategy == cand.strategy and inj.get("agent") == AGENT and \
                v.get("valid"):
            return Outcome(cand, REUSED, "already in the output directory", artifact=path,
                           artifact_id=path.name, bug_key=key, bug_files=bug_files,
                           fail_to_pass=list(v.get("fail_to_pass", [])))
        return Outcome(cand, "duplicate", f"same bug as {path.name}", bug_key=key)

    def _evaluate(self, cand: Candidate) -> Outcome:
        repo = self.repo
        assert repo is not None, "the repository is not mapped yet (Session.setup)"
        sb = self.sandbox()
        bug = self._write_bug(sb, cand)
        if not bug.strip():
            return Outcome(cand, "unchanged", "the edit changes nothing")
        key = hashlib.sha256(bug.encode()).hexdigest()
        bug_files = tuple(patches.touched_files(bug, BUG_DIFF))
        if key in self.existing:
            found = self._existing(cand, key, bug_files)
            if found is not None:
                return found

        # tests: what must run
        if cand.test_files:
            files = [f for f in cand.test_files if f in repo.usable_files]
            sel = repo.select_tests({t for f in files for t in repo.tests_by_file.get(f, [])})
        else:
            sel = repo.select_tests(set(cand.prescreen_tests))
        if sel is None:
            return Outcome(cand, "no_tests", f"fewer than {self.settings.min_passing_tests} passing tests cover it",
                           bug_key=key)
        screened = self._prescreen(sb, cand, key, sel)
        if isinstance(screened, Outcome):
            return screened
        runs, shown, spoiled = screened
        if shown and not cand.test_files:  # the covering files where the bug showed, not every covering file
            sel = repo.select_tests(shown, avoid=spoiled) or sel
        test_files, deselect, expected = sel

        # which selected tests fail with the bug
        script = repo.profile.script(test_files, deselect)
        parser = repo.profile.parser()
        run = run_tests(sb, script, parser, timeout=self.run_timeout(expected))
        runs += 1
        if run.timed_out:
            return Outcome(cand, "timeout", "the selected tests timed out with the bug", bug_key=key, runs=runs)
        failing = [t for t in expected if run.statuses.get(t) != PASSED]
        if not failing:
            return Outcome(cand, "harmless", "no selected test fails", bug_key=key, runs=runs)
        if len(failing) == len(expected):
            return Outcome(cand, "total_break", "every selected test fails", bug_key=key, runs=runs)

        try:
            weaken = _weaken(sb, repo, failing, test_files)
        except (_Unlocatable, WeakenError) as e:  # here, not in `evaluate`: the runs made count
            return Outcome(cand, "unweakenable", str(e), bug_key=key, runs=runs)

        # the artifact, validated in this sandbox
        staging = self.staging / staging_name(cand)
        if staging.is_symlink():
            staging.unlink()  # a link in ssrkit's own staging directory: removed, what it points to left alone
        elif staging.exists():
            shutil.rmtree(staging)
        meta = Metadata(repo=self.label, base_commit=self.base_commit, strategy=cand.strategy, order=1,
                        injector=cand.injector(self.seed))
        art = create_artifact(staging, bug_diff=bug, weaken_diff=weaken, test_script=script,
                              test_files=test_files, test_parser=parser, metadata=meta)
        known = {"bug": run}  # validation's bug_breaks run: the same state, already run
        report = self.validator.validate(art, self.source, known=known)
        write_report(art, report)
        runs += sum(1 for name in report.runs if name not in known) - report.original_cached
        if not report.valid:
            first = report.first_failure
            flaky = []
            if first is not None and first.name == "original_passes":
                statuses = report.runs.get("original", {}).get("statuses", {})
                flaky = sorted(t for t, st in statuses.items() if st != PASSED)
            return Outcome(cand, "invalid", f"{first.name}: {first.message}" if first else "invalid",
                           artifact=staging, artifact_id=art.id, bug_key=key, runs=runs, flaky=flaky)
        return Outcome(cand, VALID, f"{len(report.fail_to_pass)} FAIL_TO_PASS", artifact=staging,
                       artifact_id=art.id, bug_key=key, bug_files=bug_files,
                       fail_to_pass=list(report.fail_to_pass), runs=runs)

    # -- the pre-screen ---------------------------------------------------------------------------------
    def _prescreen(self, sb: Sandbox, cand: Candidate, key: str,
                   sel: tuple[list[str], list[str], list[str]]) -> Outcome | tuple[int, set[str], set[str]]:
        """Smoke tests, then the selected tests that run the changed code, to the first failure: the discard,
        or (runs made, the removable covering test that failed first: the artifact's selection starts from its
        file, the files where a test with no definition failed: never selected)."""
        repo = self.repo
        assert repo is not None
        test_files, _, expected = sel
        expected_set = set(expected)
        covering = _cheapest(repo, [t for t in cand.prescreen_tests if t in expected_set])
        if not covering:
            return Outcome(cand, "no_tests", "no passing test of the selected files runs the changed code",
                           bug_key=key)
        fixed = [t for t in covering if not self._removable(sb, repo, t, test_files)]
        if len(fixed) == len(covering):
            return Outcome(cand, "unweakenable", f"none of the {len(covering)} tests that run the changed code "
                                                 f"is defined in its file (generated at run time?), e.g. "
                                                 f"{covering[0]}: a failing one could not be removed", bug_key=key)
        smoke = self._smoke_tests(cand, repo, expected, covering)
        fixed_set = set(fixed)
        removable_ones = [t for t in covering if t not in fixed_set and t not in smoke]
        if not cand.test_files:  # the artifact runs a file of a removable covering test: only those files matter
            open_files = {repo.tm.file_of(t) for t in covering if t not in fixed_set}
            fixed = [t for t in fixed if repo.tm.file_of(t) in open_files]
        first_fixed = [t for t in fixed if t not in smoke]
        order = (smoke + first_fixed + removable_ones)[:MAX_PRESCREEN_TESTS]
        runs = 1  # tests without a definition first, all run before a removable test's failure can stop the run
        maxfail = max(1, len(smoke)) + (len(first_fixed) if not cand.test_files else 0)
        pre = sb.run(repo.profile.failfast_command(order, maxfail=maxfail), timeout=self.run_timeout(order))
        verdict = _prescreen_verdict(repo.profile.runner, pre)
        if verdict != "fails":
            return Outcome(cand, verdict, tail(pre.output), bug_key=key, runs=runs)
        failed = self._failed(sb, repo, pre.output)
        if smoke and failed >= set(smoke):
            runs += 1 if tuple(smoke) not in self._smoke else 0
            if self._smoke_passes(sb, repo, smoke):
                why = ("tests that never run the changed lines among them" if set(smoke) - set(covering)
                       else "one per test file")
                return Outcome(cand, "total_break", f"every smoke test failed ({listing(smoke, 3)}; {why}): the "
                                                    "bug breaks everything", bug_key=key, runs=runs)
            self._write_bug(sb, cand)  # the smoke tests fail on the original code too: screen by the rest
            failed -= set(smoke)
        unremovable = [t for t in covering if t in fixed_set and t in failed]
        spoiled = {repo.tm.file_of(t) for t in unremovable}
        first = next((t for t in removable_ones if t in failed and repo.tm.file_of(t) not in spoiled), None)
        if unremovable and (cand.test_files or first is None):
            return Outcome(cand, "unweakenable", f"{unremovable[0]} fails with the bug and has no definition in "
                                                 "its file to remove (generated at run time?)", bug_key=key,
                           runs=runs)
        return runs, ({first} if first is not None else set()), spoiled

    def run_timeout(self, tests: list[str]) -> float:
        """Seconds a screening run of `tests` may take: a few times what they took under coverage, plus the
        suite's start-up there; `screen_timeout` at most (and always, when [inject] screen_timeout set it)."""
        cap = self.screen_timeout or self.settings.timeout
        if not self.estimate_timeouts or self.repo is None:
            return cap
        return min(cap, max(MIN_RUN_TIMEOUT, RUN_TIMEOUT_FACTOR * self.repo.seconds(tests)))

    def _smoke_tests(self, cand: Candidate, repo: RepoView, expected: list[str], covering: list[str]) -> list[str]:
        """A mutation's smoke tests: the cheapest selected tests that do not run the changed lines, then the
        cheapest covering test of each other file; none for a history revert or a combination (their changes
        may reach any test), nor under unittest (it cannot stop after a few failures), nor with fewer than 2."""
        if cand.line is None or repo.profile.runner != PYTEST:
            return []
        cover = set(covering)
        out = [t for t in _cheapest(repo, [t for t in expected if t not in cover])
               if self._smoke.get((t,), True)][:SMOKE_TESTS]
        files = {repo.tm.file_of(t) for t in out}
        for t in covering:
            if len(out) >= SMOKE_TESTS:
                break
            if repo.tm.file_of(t) not in files:
                out.append(t)
                files.add(repo.tm.file_of(t))
        return out if len(out) >= 2 else []

    def _smoke_passes(self, sb: Sandbox, repo: RepoView, smoke: list[str]) -> bool:
        """Do the smoke tests pass on the original code, run alone? (Once per set: a test that needs another
        to run first would make every candidate look like a total break.) Leaves the sandbox at BASE."""
        key = tuple(smoke)
        if key not in self._smoke:
            sb.reset(BASE)
            res = sb.run(repo.profile.failfast_command(smoke), timeout=self.run_timeout(smoke))
            self._smoke[key] = res.exit_code == 0 and not res.timed_out
            if not self._smoke[key]:
                for t in smoke:
                    self._smoke[(t,)] = False  # never a smoke test again
        return self._smoke[key]

    def _failed(self, sb: Sandbox, repo: RepoView, log: str) -> set[str]:
        """The tests a pre-screen's log reports as failed (by the runner's parser; empty if it cannot tell)."""
        statuses, _error, _ = run_parser(sb, repo.profile.parser(), log)
        return {t for t, st in (statuses or {}).items() if st not in (PASSED, SKIPPED)}

    def _removable(self, sb: Sandbox, repo: RepoView, test: str, test_files: list[str]) -> bool:
        """Could `_weaken` remove `test` (a definition of it in a selected Python test module)?"""
        def read(f: str) -> str:
            return sb.read_file(f).decode("utf-8")

        loc = locate_test(test, repo.profile.runner, repo.tm.test_files, test_files)
        try:
            if loc is not None and loc.classes:
                loc = relocate(loc, read, repo.tests_by_file)
        except (OSError, UnicodeDecodeError):
            return False
        if loc is None or loc.file not in test_files or not loc.file.endswith(".py"):
            return False
        with self._lock:
            known = loc.file in self._trees
        if not known:
            try:
                tree: ast.Module | None = pyast.parse(read(loc.file), loc.file)
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                tree = None
            with self._lock:
                self._trees[loc.file] = tree
        tree = self._trees[loc.file]
        return tree is not None and removable(tree, loc)


def _cheapest(repo: RepoView, tests: list[str]) -> list[str]:
    """`tests`, the quickest under coverage first (by `cost_rank`; ties in name order)."""
    return sorted(tests, key=lambda t: (cost_rank(repo.tm.durations.get(t, 0.0)), t))


class _Unlocatable(Exception):
    """A failing test that `_weaken` cannot find in a selected Python test module."""


def _weaken(sb: Sandbox, repo: RepoView, failing: list[str], test_files: list[str]) -> str:
    """test_weaken.diff: exactly the `failing` test functions removed (from the BASE state)."""
    by_file: dict[str, list] = {}
    for t in failing:
        loc = locate_test(t, repo.profile.runner, repo.tm.test_files, test_files)
        if loc is not None and loc.classes:
            loc = relocate(loc, lambda f: sb.read_file(f).decode("utf-8"), repo.tests_by_file)
        if loc is None or loc.file not in test_files:
            where = f" (defined in {loc.file}, not a selected test file)" if loc is not None else ""
            raise _Unlocatable(f"cannot locate the test {t}{where}")
        if not loc.file.endswith(".py"):
            raise _Unlocatable(f"the failing test {t} is in {loc.file}, not a Python test module; skipped")
        by_file.setdefault(loc.file, []).append(loc)
    sb.reset(BASE)
    for f, locs in sorted(by_file.items()):
        text = sb.read_file(f).decode("utf-8")
        sb.write_file(f, remove_tests(text, locs, f))
    return sb.diff()


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


# -- one candidate of the procedural injector --------------------------------------------------------

@dataclass
class CandidateEnv:
    """What evaluating any candidate of one procedural `inject` run needs, as data."""

    source: SourceRef
    seed: int
    settings: Any  # validate.Settings
    repo: Any  # inject.candidates.RepoView, `for_evaluation()`: no source texts
    base_commit: str | None
    screen_timeout: float | None
    existing: dict[str, Any]  # bug hash -> inject.evaluate.Existing
    backend: str
    options: SandboxOptions | None
    staging: str  # the driver's staging directory
    estimate_timeouts: bool = False  # `Evaluator.estimate_timeouts`


def candidate_unit(env: CandidateEnv, cand: Any) -> tuple[Any, dict[str, bytes] | None]:
    """One candidate evaluated in a fresh sandbox of this machine: (its Outcome, the files of the artifact
    it wrote — this machine's paths replaced by the driver's — for the driver to write into staging)."""
    from ..sandbox import open_sandbox

    with Scratch() as scratch:
        source = env.source.materialize()
        ev = Evaluator(source, scratch, seed=env.seed, settings=env.settings, label=env.source.source,
                       opener=lambda src: open_sandbox(src, env.backend, env.options))
        ev.repo, ev.base_commit, ev.screen_timeout = env.repo, env.base_commit, env.screen_timeout
        ev.estimate_timeouts = env.estimate_timeouts
        ev.existing = env.existing
        try:
            outcome = ev.evaluate(cand)
        finally:
            ev.close()
        mapping = path_mapping(scratch, ArtifactRef(env.staging), source, env.source)  # scratch stands for staging
        files = None
        if outcome.artifact is not None and outcome.artifact.is_relative_to(scratch):
            files = relabel_bytes(read_tree(outcome.artifact), mapping)
            outcome.artifact = Path(env.staging) / outcome.artifact.relative_to(scratch)
    return relabel(outcome, mapping), files
