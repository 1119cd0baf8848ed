#!/usr/bin/env python3
"""Grading with the clean sandbox's parser started while the tests run (`testrun._ParseAhead`) against the
same grading with the parser started after the run, interleaved attempt by attempt in one process, so the
machine's drift hits both alike.

For each example repository it grades the oracle fix of every valid artifact in both ways, each round in
the other order, and runs the artifact's tests once raw (`validate_overhead.raw_run`: the test script and
the parser in a plain copy). Per round: the sum of grade times over the sum of raw runs; printed: the
median of the rounds and their range, against issue 15's target (grade one passing attempt <= 2.20x one
raw run). Needs bubblewrap (the parser is started ahead only under it).

Usage: python benchmarks/grade_parse_ahead.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _checkout import use_checkout  # noqa: E402

use_checkout()

import validate_overhead as vo  # noqa: E402

from ssrkit import patch  # noqa: E402
from ssrkit.store.artifact import find_artifacts  # noqa: E402
from ssrkit.examples import materialize  # noqa: E402
from ssrkit.solve.grade import GradeSettings, grade  # noqa: E402
from ssrkit.sandbox import open_sandbox  # noqa: E402
from ssrkit.sandbox.local import LocalSandbox, isolation_available  # noqa: E402
from ssrkit.store.source import RepoSource  # noqa: E402
from ssrkit.validate import Settings, Validator, validate_all  # noqa: E402

AHEAD = LocalSandbox.parses_ahead


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    why = isolation_available()
    if why:
        raise SystemExit(f"bubblewrap unusable ({why}): the parser is started ahead only under it")
    tmp = Path(tempfile.mkdtemp(prefix="ssrkit-bench-"))
    os.environ["SSRKIT_CACHE"] = str(tmp / "cache")
    repos = {p.name: p for p in materialize(vo.ROOT / "examples" / "repos", tmp)}
    print(f"{'repository':<12} {'parser started ahead':>22} {'started after the run':>22} {'target':>9}")
    for name, repo in sorted(repos.items()):
        arts = [a for a in find_artifacts([vo.ROOT / "examples" / "artifacts" / name]) if a.name.startswith("valid-")]
        mine = vo.copies(arts, tmp / f"arts-{name}")
        src = RepoSource.local(repo)
        validate_all([(a, src) for a in mine], Validator(Settings(jobs=2, cache=True)), redo=True)
        ratios: dict[str, list[float]] = {"ahead": [], "after": []}
        for rnd in range(max(1, args.rounds)):
            spent = {"ahead": 0.0, "after": 0.0}
            raw = 0.0
            for a in mine:
                for mode in (("ahead", "after") if rnd % 2 else ("after", "ahead")):
                    LocalSandbox.parses_ahead = AHEAD if mode == "ahead" else property(lambda self: False)
                    with open_sandbox(src, "local") as work, open_sandbox(src, "local") as clean:
                        t0 = time.perf_counter()
                        g = grade(work, a, patch.reverse(a.bug_diff), clean=clean, settings=GradeSettings())
                        spent[mode] += time.perf_counter() - t0
                    if not g.passed:
                        raise SystemExit(f"the oracle fix of {a.path} failed grading: {g.reason}")
                raw += vo.raw_run(repo, a, [])
            for mode in ratios:
                ratios[mode].append(spent[mode] / raw)
        LocalSandbox.parses_ahead = AHEAD
        cells = [f"{statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f})" for v in ratios.values()]
        print(f"{name:<12} {cells[0]:>22} {cells[1]:>22} {'<= 2.20x':>9}")


if __name__ == "__main__":
    main()
