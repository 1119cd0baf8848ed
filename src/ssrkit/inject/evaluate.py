"""One candidate of the procedural injector, evaluated in a worker's sandbox (SPEC §4).

Each worker thread has one sandbox, prepared once (uncommitted work committed, that state snapshotted as
`BASE`) and reset between candidates, never re-created. Per candidate: write the bug and take `git diff`;
pre-screen by running only the tests covering the mutated lines with fail-fast (nothing fails, or the tests
do not even import ⇒ discard); run the selected test files to find the failing tests; remove exactly those
test functions (`test_weaken.diff`); write the artifact into the staging directory and validate it with
`ssrkit.validate` in the same sandbox, handing over the bug run just made. Under a portable executor
(Ray) each candidate is instead a unit with one fresh sandbox on whichever node runs it
(`candidate_unit`, below). Which candidates are evaluated, which valid ones are kept, and which tests found
flaky (`Outcome.flaky`) are no longer selected is `procedural`'s business.
"""

from __future__ import annotations

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
from ..artifact import BUG_DIFF, Metadata, create_artifact
from ..errors import SsrkitError
from ..executor import ArtifactRef, Scratch, SourceRef, read_tree, relabel
from ..sandbox import Sandbox, SandboxOptions
from ..source import RepoSource
from ..testrun import PASSED, run_tests
from ..units import path_mapping, relabel_bytes
from ..validate import Settings, Validator, write_report
from .candidates import AGENT, REUSED, VALID, Candidate, Outcome, RepoView, tail
from .runner import PYTEST, locate_test
from .weaken import WeakenError, relocate, remove_tests

#: the snapshot of a worker's sandbox that every candidate starts from
BASE = "inject-base"
MAX_PRESCREEN_TESTS = 200


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
                sb.run(f"rm -f -- {shlex.quote(path)}", timeout=30)
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
        timeout = self.screen_timeout or self.settings.timeout
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
        test_files, deselect, expected = sel

        # pre-screen: only the covering tests, stop at the first failure
        runs = 1
        pre = sb.run(repo.profile.failfast_command(cand.prescreen_tests[:MAX_PRESCREEN_TESTS]), timeout=timeout)
        verdict = _prescreen_verdict(repo.profile.runner, pre)
        if verdict != "fails":
            return Outcome(cand, verdict, tail(pre.output), bug_key=key, runs=runs)

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

        try:
            weaken = _weaken(sb, repo, failing, test_files)
        except _Unlocatable as e:
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


def candidate_unit(env: CandidateEnv, cand: Any) -> tuple[Any, dict[str, bytes] | None]:
    """One candidate evaluated in a fresh sandbox of this machine: (its Outcome, the files of the artifact
    it wrote — this machine's paths replaced by the driver's — for the driver to write into staging)."""
    from ..sandbox import open_sandbox

    with Scratch() as scratch:
        source = env.source.materialize()
        ev = Evaluator(source, scratch, seed=env.seed, settings=env.settings, label=env.source.source,
                       opener=lambda src: open_sandbox(src, env.backend, env.options))
        ev.repo, ev.base_commit, ev.screen_timeout = env.repo, env.base_commit, env.screen_timeout
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
