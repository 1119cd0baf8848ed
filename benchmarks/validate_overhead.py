#!/usr/bin/env python3
"""How much does validation cost on top of the tests themselves?

For each repository and its artifacts this prints:
  raw       the sum of the test-script times of every run validation makes (original, bug, bug+weaken, one
            per file for multi-file bugs), each run directly in a plain copy of the repository — what a
            naive serial validator would pay, the original run repeated for every artifact;
  serial    `validate` wall time with --jobs 1 and no cache, one artifact at a time, each between two
            measures of its raw runs, whose mean is its raw time (overhead = serial / raw - 1);
  jobs 2    `validate` wall time with --jobs 2 and the original-run cache (target: below raw);
  cmds      sandbox commands per artifact validated (serial, no cache) and per grade: counted, so exact
            however loaded the machine is;
  grade     grading the oracle fix of each artifact (canary included: the graded run, the canary run, the
            parses in a clean sandbox), per attempt, against one raw run of the same tests (the mean of
            one just before and one just after);
  floor     what grading a passing attempt cannot go below, as a ratio to the same raw run: its two test
            runs (the graded one and the canary's) and the git work of the graded state (the artifact's
            diffs, the fresh one-commit history the solver saw, the fix), each done raw in a plain copy;
and, per sandbox backend, the cost of one workspace (open + pristine snapshot), one exec (`true`) and one
reset. Last, the table of issue 15 with its targets and whether each is met: each ratio is measured per
round (`--repeat` rounds, each measuring every number once, back to back) and the median of the rounds is
kept, with their range: the machine's speed drifts more between rounds than within one.

Usage:
  python benchmarks/validate_overhead.py                          # the example repositories
  python benchmarks/validate_overhead.py --real REPO ARTIFACT...  # add a repository of your own
  python benchmarks/validate_overhead.py --src /tmp/base          # another worktree's code (before/after)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _checkout import use_checkout  # noqa: E402

use_checkout()

from ssrkit import patch  # noqa: E402
from ssrkit.store.artifact import Artifact, find_artifacts  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402
from ssrkit.sandbox import PRISTINE, open_sandbox  # noqa: E402
from ssrkit.sandbox.factory import docker_available  # noqa: E402
from ssrkit.store.source import RepoSource  # noqa: E402
from ssrkit.validate import Settings, Validator, validate_all  # noqa: E402


def raw_run(repo: Path, art: Artifact, diffs: list[str]) -> float:
    """Time test_script.sh | test_parser.py in a plain copy of the repository (no sandbox)."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-raw-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(repo, work, symlinks=True)
        for d in diffs:
            patch.apply(work, d)
        (Path(tmp) / "s.sh").write_text(art.test_script)
        (Path(tmp) / "p.py").write_text(art.test_parser)
        t0 = time.perf_counter()
        log = subprocess.run(["bash", str(Path(tmp) / "s.sh")], cwd=work, capture_output=True, timeout=600).stdout
        subprocess.run([sys.executable, str(Path(tmp) / "p.py")], input=log, capture_output=True, timeout=600)
        return time.perf_counter() - t0


def raw_total(repo: Path, arts: list[Artifact]) -> float:
    total = 0.0
    for a in arts:
        bug, weaken = a.bug_diff, a.weaken_diff
        total += raw_run(repo, a, [])
        total += raw_run(repo, a, [bug])
        total += raw_run(repo, a, [bug, weaken])
        per_file = patch.split_by_file(bug)
        if len(per_file) > 1:
            for path in per_file:
                total += raw_run(repo, a, ["".join(d for p, d in per_file.items() if p != path)])
    return total


def copies(arts: list[Artifact], dest: Path) -> list[Artifact]:
    out = []
    for a in arts:
        d = dest / a.path.parent.name / a.path.name
        shutil.copytree(a.path, d, ignore=shutil.ignore_patterns("validation.json", "logs"))
        out.append(Artifact(d))
    return out


#: sandbox commands run by this process so far (counted, unlike times, exactly whatever the load)
EXECS = [0]


def count_execs() -> None:
    from ssrkit.sandbox.local import LocalSandbox

    real = LocalSandbox.run

    def run(self, *a, **kw):
        EXECS[0] += 1
        return real(self, *a, **kw)

    LocalSandbox.run = run  # type: ignore[method-assign]


def timed_validate(repo: Path, arts: list[Artifact], jobs: int, cache: bool) -> tuple[float, int]:
    """(seconds, sandbox commands) of validating copies of `arts`."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-bench-") as tmp:
        os.environ["SSRKIT_CACHE"] = str(Path(tmp) / "cache")
        mine = copies(arts, Path(tmp) / "arts")
        items = [(a, RepoSource.local(repo)) for a in mine]
        n0 = EXECS[0]
        t0 = time.perf_counter()
        validate_all(items, Validator(Settings(jobs=jobs, cache=cache)), redo=True)
        return time.perf_counter() - t0, EXECS[0] - n0


def raw_prepare(repo: Path, art: Artifact) -> float:
    """Time the git work of grading's graded state (`grade.prepare`) in a plain copy: apply the bug and the
    weakening, a fresh one-commit history, apply the fix (the oracle's: the bug reversed)."""
    from ssrkit.sandbox.git import fresh_history_command

    with tempfile.TemporaryDirectory(prefix="ssrkit-raw-") as tmp:
        work = Path(tmp) / "repo"
        shutil.copytree(repo, work, symlinks=True)
        for name, text in (("b.diff", art.bug_diff), ("w.diff", art.weaken_diff), ("f.diff", patch.reverse(art.bug_diff))):
            (Path(tmp) / name).write_text(text)
        d = Path(tmp)
        script = (f"git apply {d / 'b.diff'} && git apply {d / 'w.diff'} && {fresh_history_command('Initial commit')} "
                  f"&& git apply {d / 'f.diff'}")
        t0 = time.perf_counter()
        subprocess.run(["bash", "-c", script], cwd=work, check=True, capture_output=True, timeout=600)
        return time.perf_counter() - t0


def grade_per_attempt(repo: Path, arts: list[Artifact]) -> tuple[float, float, float, float]:
    """(mean seconds to grade the oracle fix of a (validated) artifact, mean raw seconds of one run, mean
    sandbox commands per grade, mean floor of a grade in seconds: two raw runs and the raw git work)."""
    from ssrkit.solve.grade import GradeSettings, grade

    graded = raw = floor = 0.0
    cmds = 0
    src = RepoSource.local(repo)
    for a in arts:
        before = raw_run(repo, a, [])  # a raw run on either side of the grade (see main)
        with open_sandbox(src, "local") as work, open_sandbox(src, "local") as clean:
            n1 = EXECS[0]
            t0 = time.perf_counter()
            g = grade(work, a, patch.reverse(a.bug_diff), clean=clean, settings=GradeSettings())
            graded += time.perf_counter() - t0
            cmds += EXECS[0] - n1
        if not g.passed:
            raise SystemExit(f"the oracle fix of {a.path} failed grading: {g.reason}")
        one = (before + raw_run(repo, a, [])) / 2
        raw += one
        floor += 2 * one + raw_prepare(repo, a)
    return graded / len(arts), raw / len(arts), cmds / len(arts), floor / len(arts)


def timed_validate_and_grade(repo: Path, arts: list[Artifact]) -> tuple[float, float, float, float, float]:
    """(validate --jobs 2 + cache seconds, grade seconds per attempt, raw seconds per run, commands per
    grade, the floor of a grade in seconds)."""
    with tempfile.TemporaryDirectory(prefix="ssrkit-bench-") as tmp:
        os.environ["SSRKIT_CACHE"] = str(Path(tmp) / "cache")
        mine = copies(arts, Path(tmp) / "arts")
        items = [(a, RepoSource.local(repo)) for a in mine]
        t0 = time.perf_counter()
        validate_all(items, Validator(Settings(jobs=2, cache=True)), redo=True)
        par = time.perf_counter() - t0
        g, r, n, f = grade_per_attempt(repo, mine)
        return par, g, r, n, f


def workspace_kind() -> str:
    from ssrkit.sandbox.local import LocalSandbox

    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["git", "init", "-q", d], check=True)
        sb = LocalSandbox(d)
        try:
            return f"{getattr(sb, 'workspace_kind', 'copy')}, {sb.isolation['mechanism']}"
        finally:
            sb.close()


TARGETS = {  # issue 15: measure -> (target, lower is better)
    "validate serial / raw, ledger": 1.10,
    "validate --jobs 2 + cache / raw, ledger": 0.75,
    "validate --jobs 2 + cache / raw, textkit": 0.70,
    "grade one passing attempt / one raw run, ledger": 2.20,
    "grade one passing attempt / one raw run, textkit": 2.20,
}


def backend_costs(source: RepoSource, backend: str, n: int = 5) -> tuple[float, float, float]:
    opens, execs, resets = [], [], []
    for _ in range(n):
        t0 = time.perf_counter()
        sb = open_sandbox(source, backend)
        opens.append(time.perf_counter() - t0)
        try:
            for _ in range(3):
                t0 = time.perf_counter()
                sb.run("true", timeout=30)
                execs.append(time.perf_counter() - t0)
            sb.run("echo x > touched.txt", timeout=30)
            t0 = time.perf_counter()
            sb.reset(PRISTINE)
            resets.append(time.perf_counter() - t0)
        finally:
            sb.close()
    return statistics.median(opens), statistics.median(execs), statistics.median(resets)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--real", nargs="+", metavar=("REPO", "ARTIFACT"), action="append", default=[],
                    help="a repository followed by artifact directories for it")
    ap.add_argument("--repeat", type=int, default=5,
                    help="rounds: each measures every number once; ratios are the median of the rounds' (default 5)")
    ap.add_argument("--image", action="append", default=[],
                    help="also measure the docker backend on this image (e.g. one made by `ssrkit image build`)")
    ap.add_argument("--src", metavar="CHECKOUT", help="measure the ssrkit code of another checkout (a worktree)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="ssrkit-bench-repos-"))
    repos = {p.name: p for p in materialize(ROOT / "examples" / "repos", tmp)}
    sets: list[tuple[str, Path, list[Artifact]]] = []
    for name, repo in sorted(repos.items()):
        arts = [a for a in find_artifacts([ROOT / "examples" / "artifacts" / name]) if a.name.startswith("valid-")]
        sets.append((name, repo, arts))
    for group in args.real:
        repo = Path(group[0]).resolve()
        sets.append((repo.name, repo, find_artifacts([Path(p) for p in group[1:]])))

    count_execs()
    print(f"workspaces: {workspace_kind()}")
    print(f"{'repository':<12} {'artifacts':>9} {'raw s':>8} {'serial s':>9} {'overhead':>9} {'jobs2+cache s':>14} "
          f"{'vs raw':>7} {'grade s':>8} {'run s':>6} {'grade/run':>9} {'floor':>6} {'cmds/art':>8} {'cmds/grade':>10}")
    ratios: dict[str, list[float]] = {}
    floors: dict[str, list[float]] = {}  # per measure that has one: its floor here and now, per round
    for name, repo, arts in sets:
        rounds = []
        for _ in range(max(1, args.repeat)):  # a round measures each number once, back to back
            raw = serial = 0.0
            cmds = 0
            for a in arts:  # each artifact's validation between two of its raw runs: the machine's drift
                before = raw_total(repo, [a])  # over those seconds cancels out
                t, n = timed_validate(repo, [a], jobs=1, cache=False)
                raw += (before + raw_total(repo, [a])) / 2
                serial, cmds = serial + t, cmds + n
            par, grade_s, run_s, gcmds, floor_s = timed_validate_and_grade(repo, arts)
            rounds.append((raw, serial, par, grade_s, run_s, floor_s))
        raw, serial, par, grade_s, run_s, floor_s = (statistics.median(col) for col in zip(*rounds))
        print(f"{name:<12} {len(arts):>9} {raw:>8.2f} {serial:>9.2f} {serial / raw - 1:>+9.1%} {par:>14.2f} "
              f"{par / raw:>6.2f}x {grade_s:>8.2f} {run_s:>6.2f} {grade_s / run_s:>8.2f}x {floor_s / run_s:>5.2f}x "
              f"{cmds / len(arts):>8.1f} {gcmds:>10.1f}")
        # a ratio per round (its two times measured minutes apart at most), then the median of the rounds:
        # the machine's speed drifts between rounds more than within one
        ratios[f"validate serial / raw, {name}"] = [r[1] / r[0] for r in rounds]
        ratios[f"validate --jobs 2 + cache / raw, {name}"] = [r[2] / r[0] for r in rounds]
        ratios[f"grade one passing attempt / one raw run, {name}"] = [r[3] / r[4] for r in rounds]
        floors[f"grade one passing attempt / one raw run, {name}"] = [r[5] / r[4] for r in rounds]

    print()
    print(f"{'backend':<14} {'source':<22} {'workspace s':>12} {'exec s':>8} {'reset s':>8}")
    sources = [(name, RepoSource.local(repo)) for name, repo, _ in sets]
    for name, src in sources:
        o, e, r = backend_costs(src, "local")
        print(f"{'local':<14} {name:<22} {o:>12.3f} {e:>8.4f} {r:>8.4f}")
    reason = docker_available()
    for image in args.image:
        if reason:
            print(f"{'docker':<14} {image:<22} skipped: {reason}")
            continue
        o, e, r = backend_costs(RepoSource.from_image(image), "docker", n=3)
        print(f"{'docker':<14} {image:<22} {o:>12.3f} {e:>8.4f} {r:>8.4f}")
    shutil.rmtree(tmp, ignore_errors=True)

    print()
    print(f"{'issue 15 measure (median of the rounds)':<52} {'measured':>9} {'rounds':>13} {'target':>8}  met")
    for measure, values in ratios.items():
        value = statistics.median(values)
        target = TARGETS.get(measure)
        goal = f"<= {target:.2f}x" if target is not None else ""
        met = ("yes" if value <= target else "NO") if target is not None else ""
        spread = f"{min(values):.2f}-{max(values):.2f}"
        print(f"{measure:<52} {value:>8.2f}x {spread:>13} {goal:>8}  {met}")
        if measure in floors:
            floor = statistics.median(floors[measure])
            print(f"{'  its floor: 2 raw runs + the raw git work':<52} {floor:>8.2f}x {'':>13} {'':>8}  "
                  f"(ssrkit's own part: {value - floor:+.2f}x)")


if __name__ == "__main__":
    main()
