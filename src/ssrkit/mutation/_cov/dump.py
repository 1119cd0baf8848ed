"""Combine ssrkit's per-test coverage data and print it as JSON (run without coverage measuring it).

usage: python dump.py ROOT COVDIR OUTFILE
Writes {"contexts": [test ids], "files": {relpath: {context index: [lines]}},
        "outcomes": {test id: status}, "test_files": {test id: relpath}, "doctests": [test ids],
        "broken": {relpath: message}, "tracer": "...", "durations": {test id: seconds},
        "cut": [test ids interrupted at the per-test limit],
        "files_cut": [relpaths of test files whose remaining tests were skipped at the per-file limit]}.
"""

import glob
import json
import os
import sys

from ssrkit_cov import import_coverage


def rel(path, root):
    path = os.path.realpath(path)
    r = os.path.relpath(path, root)
    return None if r.startswith("..") else r.replace(os.sep, "/")


def main():
    root, covdir, outfile = os.path.realpath(sys.argv[1]), sys.argv[2], sys.argv[3]
    coverage, _ = import_coverage()
    if coverage is None:
        sys.exit("coverage is not importable (neither the environment's nor ssrkit's copy)")
    outcomes, test_files, doctests, broken, tracers, durations, cut = {}, {}, set(), {}, set(), {}, set()
    files_cut = set()
    rank = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}
    for name in sorted(glob.glob(os.path.join(covdir, "outcomes-*.json"))):
        with open(name) as fh:
            part = json.load(fh)
        for test_id, status in part["outcomes"].items():
            if test_id not in outcomes or rank[status] > rank[outcomes[test_id]]:
                outcomes[test_id] = status
        for test_id, path in part["files"].items():
            r = rel(path, root)
            if r:
                test_files[test_id] = r
        doctests.update(part.get("doctests", ()))
        cut.update(part.get("cut", ()))
        files_cut.update(r for r in (rel(p, root) for p in part.get("files_cut", ())) if r)
        for path, message in part.get("broken", {}).items():
            r = rel(path, root)
            if r:
                broken[r] = message
        for test_id, seconds in part.get("durations", {}).items():
            durations[test_id] = max(durations.get(test_id, 0.0), round(seconds, 4))
        if part.get("tracer"):
            tracers.add(part["tracer"])
    cov = coverage.Coverage(data_file=os.path.join(covdir, ".coverage"), config_file=False)
    if glob.glob(os.path.join(covdir, ".coverage.*")):
        cov.combine([covdir], keep=True)
    data = cov.get_data()
    contexts = sorted(c for c in data.measured_contexts() if c)
    index = {c: i for i, c in enumerate(contexts)}
    files = {}
    for measured in sorted(data.measured_files()):
        r = rel(measured, root)
        if r is None:
            continue
        per = {}
        for line, ctxs in sorted(data.contexts_by_lineno(measured).items()):
            for c in ctxs:
                if c:
                    per.setdefault(index[c], []).append(line)
        if per:
            files[r] = {str(k): v for k, v in sorted(per.items())}
    with open(outfile + ".tmp", "w") as fh:
        json.dump({"contexts": contexts, "files": files, "outcomes": outcomes, "test_files": test_files,
                   "doctests": sorted(doctests), "broken": broken, "tracer": ", ".join(sorted(tracers)),
                   "durations": durations, "cut": sorted(cut), "files_cut": sorted(files_cut)}, fh)
    os.replace(outfile + ".tmp", outfile)


if __name__ == "__main__":
    main()
