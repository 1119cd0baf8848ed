#!/usr/bin/env python3
"""Reference check of the example artifacts against SPEC §2 (a fixture aid, not the validator).

    python tests/helpers/manual_check.py [--expected examples/artifacts/expected.json] [ARTIFACT ...]

Materializes the example repositories into a temporary folder, then for every
artifact runs each check of SPEC §2 that can run at all (later checks are NOT
skipped after an earlier failure, so one sees exactly which checks an artifact
breaks), and compares the outcome with expected.json: the named check must be the
only failing one, valid artifacts must fail none, and the warnings must match.

Test runs: a fresh copy of the repository, patches applied with ``git apply``,
``bash test_script.sh`` (stdout and stderr together, 90 s timeout), the log piped
into ``python test_parser.py``.  ``python`` on PATH must have pytest installed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

from ssrkit.examples import materialize  # noqa: E402

FILES = ["bug_inject.diff", "test_weaken.diff", "test_script.sh", "test_files.txt", "test_parser.py"]
ALLOWED = {"passed", "failed", "skipped", "error"}
MIN_PASSING = 5
MIN_FAILING = 1
TIMEOUT = 90


def is_test_like(path: str) -> bool:
    parts = path.split("/")
    name = parts[-1]
    return (
        "tests" in parts[:-1]
        or name == "conftest.py"
        or (name.startswith("test_") and name.endswith(".py"))
        or name.endswith("_test.py")
    )


def diff_files(text: str) -> list[tuple[str | None, str | None]]:
    """(old, new) paths of each file in a git diff; raises ValueError if it does not parse."""
    files = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("--- "):
            if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
                raise ValueError(f"'---' without '+++' at line {i + 1}")
            old = _path(line[4:])
            new = _path(lines[i + 1][4:])
            i += 2
            if i >= len(lines) or not lines[i].startswith("@@ "):
                raise ValueError(f"no hunk after the header at line {i}")
            while i < len(lines) and lines[i].startswith("@@ "):
                m = re.match(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", lines[i])
                if not m:
                    raise ValueError(f"bad hunk header at line {i + 1}")
                old_n = int(m.group(2) or 1)
                new_n = int(m.group(4) or 1)
                i += 1
                while old_n > 0 or new_n > 0:
                    if i >= len(lines):
                        raise ValueError("hunk ends early")
                    tag = lines[i][:1]
                    if tag == " " or lines[i] == "":
                        old_n -= 1
                        new_n -= 1
                    elif tag == "-":
                        old_n -= 1
                    elif tag == "+":
                        new_n -= 1
                    elif tag == "\\":
                        pass
                    else:
                        raise ValueError(f"bad hunk line {i + 1}: {lines[i]!r}")
                    i += 1
                while i < len(lines) and lines[i].startswith("\\"):
                    i += 1
            files.append((old, new))
            continue
        i += 1
    if not files:
        raise ValueError("no file in diff")
    return files


def _path(spec: str) -> str | None:
    spec = spec.split("\t")[0].strip()
    if spec == "/dev/null":
        return None
    if spec.startswith(("a/", "b/")):
        return spec[2:]
    return spec


def unsafe(path: str | None) -> bool:
    return path is not None and (path.startswith("/") or ".." in path.split("/"))


def touched(files) -> list[str]:
    out = []
    for old, new in files:
        for p in (old, new):
            if p is not None and p not in out:
                out.append(p)
    return out


class Runner:
    def __init__(self, repo: Path, artifact: Path, work: Path):
        self.repo, self.artifact, self.work = repo, artifact, work
        self.env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        # the scripts call `python`: make it this interpreter (which has pytest)
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), self.env.get("PATH", "")])
        self.env.pop("PYTEST_ADDOPTS", None)
        self.count = 0

    def tree(self, patches=(), restore_tests=False, restore_file=None) -> Path:
        self.count += 1
        dest = self.work / f"run{self.count}"
        shutil.copytree(self.repo, dest, symlinks=True)
        for p in patches:
            self.git(dest, "apply", str(self.artifact / p))
        if restore_file is not None:
            original = self.repo / restore_file
            target = dest / restore_file
            if original.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(original, target)
            elif target.exists():
                target.unlink()
        if restore_tests:
            for f in self.test_files():
                if (self.repo / f).exists():
                    shutil.copy2(self.repo / f, dest / f)
        return dest

    def test_files(self) -> list[str]:
        return [l.strip() for l in (self.artifact / "test_files.txt").read_text().splitlines() if l.strip()]

    def git(self, cwd, *args):
        subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)

    def run(self, tree: Path) -> tuple[str, float]:
        shutil.copy2(self.artifact / "test_script.sh", tree / ".ssr_test_script.sh")
        start = time.monotonic()
        proc = subprocess.run(
            ["bash", ".ssr_test_script.sh"], cwd=tree, env=self.env, capture_output=True, text=True, timeout=TIMEOUT
        )
        return proc.stdout + proc.stderr, time.monotonic() - start

    def parse(self, log: str) -> str:
        proc = subprocess.run(
            [sys.executable, str(self.artifact / "test_parser.py")], input=log, capture_output=True, text=True, timeout=60
        )
        return proc.stdout

    def statuses(self, patches=(), restore_tests=False, restore_file=None) -> dict:
        # runs depend only on the repository, the patches, the restored file, the script
        # and the parser: artifacts that share them share the run
        key = (
            str(self.repo),
            tuple((self.artifact / p).read_text() for p in patches),
            restore_tests and tuple(self.test_files()),
            restore_file,
            (self.artifact / "test_script.sh").read_text(),
            (self.artifact / "test_parser.py").read_text(),
        )
        if key not in _CACHE:
            log, _ = self.run(self.tree(patches=patches, restore_tests=restore_tests, restore_file=restore_file))
            try:
                _CACHE[key] = json.loads(self.parse(log))
            except ValueError:
                _CACHE[key] = {}
        return dict(_CACHE[key])


_CACHE: dict = {}


def check(artifact: Path, repo: Path) -> tuple[dict, list[str]]:
    res: dict[str, tuple[str, str]] = {}
    warnings: list[str] = []
    present = {f: (artifact / f).is_file() and (artifact / f).stat().st_size > 0 for f in FILES}
    res["files"] = ("passed", "") if all(present.values()) else ("failed", f"missing/empty: {[f for f, ok in present.items() if not ok]}")

    parsed = {}
    ok_parse = True
    for name in ("bug_inject.diff", "test_weaken.diff"):
        if not present[name]:
            continue
        try:
            parsed[name] = diff_files((artifact / name).read_text())
        except ValueError as exc:
            ok_parse = False
            res["diffs_parse"] = ("failed", f"{name}: {exc}")
            continue
        bad = [p for pair in parsed[name] for p in pair if unsafe(p)]
        if bad:
            ok_parse = False
            res["diffs_parse"] = ("failed", f"{name}: unsafe paths {bad}")
    res.setdefault("diffs_parse", ("passed", ""))

    listed = []
    if present["test_files.txt"]:
        listed = [l.strip() for l in (artifact / "test_files.txt").read_text().splitlines() if l.strip()]
        missing = [p for p in listed if not (repo / p).is_file()]
        dups = len(listed) != len(set(listed))
        res["test_files_exist"] = ("failed", f"missing {missing} dups={dups}") if missing or dups else ("passed", "")

    if "test_weaken.diff" in parsed:
        outside = [p for p in touched(parsed["test_weaken.diff"]) if p not in listed]
        res["weaken_scope"] = ("failed", f"not listed: {outside}") if outside else ("passed", "")
    if "bug_inject.diff" in parsed:
        bug_files = touched(parsed["bug_inject.diff"])
        bad = [p for p in bug_files if p in listed or is_test_like(p)]
        res["bug_scope"] = ("failed", f"test-like: {bad}") if bad else ("passed", "")

    work = Path(tempfile.mkdtemp(prefix="ssr-check-"))
    try:
        runner = Runner(repo, artifact, work)
        can_apply = ok_parse and present["bug_inject.diff"]
        if can_apply:
            try:
                runner.tree(patches=["bug_inject.diff"])
                if present["test_weaken.diff"]:
                    runner.tree(patches=["bug_inject.diff", "test_weaken.diff"])
                res["applies"] = ("passed", "")
            except subprocess.CalledProcessError as exc:
                res["applies"] = ("failed", exc.stderr.strip())
                can_apply = False
        if not (present["test_script.sh"] and present["test_parser.py"]):
            return res, warnings

        log, seconds = runner.run(runner.tree())
        out1, out2 = runner.parse(log), runner.parse(log)
        original = None
        try:
            dup = []

            def hook(pairs):
                keys = [k for k, _ in pairs]
                dup.extend(k for k in keys if keys.count(k) > 1)
                return dict(pairs)

            original = json.loads(out1, object_pairs_hook=hook)
            problems = []
            if not isinstance(original, dict) or not original:
                problems.append("not a non-empty object")
            elif any(not isinstance(k, str) or v not in ALLOWED for k, v in original.items()):
                problems.append("bad status")
            if dup:
                problems.append(f"duplicate keys {sorted(set(dup))[:3]}")
            if out1 != out2:
                problems.append("not deterministic")
            res["parser"] = ("failed", "; ".join(problems)) if problems else ("passed", f"{len(original)} tests")
        except ValueError as exc:
            res["parser"] = ("failed", f"not JSON: {exc}: {out1[:60]!r}")
        if res["parser"][0] == "failed" and not isinstance(original, dict):
            return res, warnings
        res["_seconds"] = ("info", f"{seconds:.2f}")

        passing = sorted(k for k, v in original.items() if v == "passed")
        not_passing = sorted(k for k, v in original.items() if v != "passed")
        if not_passing or len(passing) < MIN_PASSING:
            res["original_passes"] = ("failed", f"{len(passing)} passing, not passing: {not_passing[:3]}")
        else:
            res["original_passes"] = ("passed", f"{len(passing)} passing")
        if not can_apply:
            return res, warnings

        bug = runner.statuses(patches=["bug_inject.diff"], restore_tests=True)
        f2p = [t for t in passing if bug.get(t) != "passed"]
        res["_f2p"] = ("info", ", ".join(f2p))
        if len(f2p) < MIN_FAILING:
            res["bug_breaks"] = ("failed", "no originally passing test fails")
        else:
            res["bug_breaks"] = ("passed", f"{len(f2p)}/{len(passing)} fail")
            if len(f2p) == len(passing):
                warnings.append("total_break")
        if not f2p:
            res["weaken_hides"] = ("skipped", "no FAIL_TO_PASS tests")
            res["inverse_mutation"] = ("skipped", "no FAIL_TO_PASS tests")
            return res, warnings
        if present["test_weaken.diff"]:
            both = runner.statuses(patches=["bug_inject.diff", "test_weaken.diff"])
            hidden = [t for t in f2p if both.get(t) == "passed" or t not in both]
            res["weaken_hides"] = ("passed", f"{len(hidden)} hidden") if hidden else ("failed", "no FAIL_TO_PASS test passes or disappears")
        bug_files = [p for p in touched(parsed["bug_inject.diff"])]
        idle = []
        for f in bug_files:
            st = runner.statuses(patches=["bug_inject.diff"], restore_tests=True, restore_file=f)
            if not any(st.get(t) == "passed" for t in f2p):
                idle.append(f)
        res["inverse_mutation"] = ("failed", f"do not contribute: {idle}") if idle else ("passed", f"{len(bug_files)} file(s)")
        return res, warnings
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("artifacts", nargs="*", type=Path)
    ap.add_argument("--expected", type=Path, default=ROOT / "examples" / "artifacts" / "expected.json")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("-j", "--jobs", type=int, default=1)
    ap.add_argument("--write-f2p", type=Path, help="write the FAIL_TO_PASS ids of each artifact to this JSON file")
    args = ap.parse_args(argv)
    base = args.expected.parent
    expected = json.loads(args.expected.read_text())
    names = [str(a.resolve().relative_to(base.resolve())) for a in args.artifacts] or sorted(expected)
    repos_dir = Path(tempfile.mkdtemp(prefix="ssr-repos-"))
    repos = {p.name: p for p in materialize(ROOT / "examples" / "repos", repos_dir)}
    bad = 0
    f2p_map = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda n: check(base / n, repos[n.split("/")[0]]), names))
    for name, (res, warnings) in zip(names, results):
        if "_f2p" in res:
            f2p_map[name] = [t for t in res["_f2p"][1].split(", ") if t]
        failed = [k for k, (s, _) in res.items() if s == "failed"]
        exp = expected.get(name)
        ok = exp is not None and (
            (exp["valid"] and not failed) or (not exp["valid"] and failed == [exp["fails"]])
        ) and sorted(warnings) == sorted(exp["warnings"])
        bad += not ok
        print(f"{'OK ' if ok else 'BAD'} {name:55s} failed={failed} warnings={warnings} t={res.get('_seconds', ('', '-'))[1]}s")
        if args.verbose or not ok:
            for k, (s, m) in res.items():
                print(f"      {k:18s} {s:7s} {m[:150]}")
    shutil.rmtree(repos_dir, ignore_errors=True)
    if args.write_f2p:
        args.write_f2p.write_text(json.dumps(f2p_map, indent=2, sort_keys=True) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
