"""Hostile fixes, bug artifacts and artifact directories against grading: each gets a clean verdict.

The classes of issue 14: git-quoted path names, a fix that behaves only while the canary is present, the
answer readable while grading, symlinked artifact outputs, oversized diffs.
"""

from __future__ import annotations

import pytest

from fixtures import calc_pkg
from fixtures.calc_pkg import FORCE_PASS_HOOK, FORGER
from fixtures.git import diff_of
from fixtures.repos import make_calc_pkg_repo


@pytest.fixture(autouse=True, params=["bwrap", "none"])
def local_isolation(request, monkeypatch):
    """Every test here runs on the local backend with bubblewrap and without it."""
    from ssrkit.sandbox.local import isolation_available

    if request.node.get_closest_marker("docker") is not None and request.param == "none":
        pytest.skip("the docker variant runs once")
    if request.param == "bwrap" and isolation_available():
        pytest.skip(f"bubblewrap unusable: {isolation_available()}")
    monkeypatch.setenv("SSRKIT_LOCAL_ISOLATION", request.param)
    return request.param


def octal(name: str) -> str:
    """`name` with its first letter written as git's C-style octal escape."""
    return f"\\{ord(name[0]):03o}{name[1:]}"


def quote_paths(diff: str, path: str) -> str:
    """Spell `path` in every header of `diff` the way git quotes unusual names."""
    spelled = path.rsplit("/", 1)
    q = (spelled[0] + "/" + octal(spelled[1])) if len(spelled) == 2 else octal(path)
    for side in ("a", "b"):
        diff = diff.replace(f"{side}/{path}", f'"{side}/{q}"')
    return diff


@pytest.mark.parametrize("path, text", [
    ("conftest.py", FORCE_PASS_HOOK),  # protected file
    ("tests/conftest.py", calc_pkg.CONFTEST + FORCE_PASS_HOOK),  # test-like file (the listed tests' dir)
    ("argparse.py", FORGER),  # stdlib shadow at the import root
    ("pytest.py", FORGER),  # the runner's own name
])
def test_quoted_names_do_not_bypass_the_path_rules(engine, calc_artifact, calc_pkg_repo, path, text):
    fix = quote_paths(diff_of(calc_pkg_repo, {path: text}), path)
    assert "\\" in fix
    g = engine.grade_fix(calc_artifact, calc_artifact.metadata.repo, fix)
    assert not g.passed, g.reason
    assert "FAIL_TO_PASS" in g.reason
    assert path in g.restored + g.deleted


def test_quoted_test_file_in_a_bug_fails_the_scope_check(tmp_path, calc_pkg_repo):
    from ssrkit.store.artifact import create_artifact, Metadata
    from ssrkit.store.source import RepoSource
    from fixtures.solving import validate

    base = calc_pkg.make_artifact(tmp_path / "base", calc_pkg_repo)
    bug = diff_of(calc_pkg_repo, {"src/calc/ops.py": calc_pkg.BUGGY_OPS, "tests/test_ops.py": calc_pkg.WEAK_TESTS})
    bug = quote_paths(bug, "tests/test_ops.py")
    art = create_artifact(tmp_path / "art", bug_diff=bug, weaken_diff=base.weaken_diff, test_script=base.test_script,
                          test_files=base.test_files, test_parser=base.test_parser,
                          metadata=Metadata(repo=RepoSource.local(calc_pkg_repo)))
    result = validate(art)
    scope = next(c for c in result["checks"] if c["name"] == "bug_scope")
    assert scope["status"] == "failed" and "tests/test_ops.py" in scope["message"], scope


@pytest.mark.parametrize("name", ['"b/\\056\\056/outside.py"', '"b/\\056git/hooks/pre-commit"'])
def test_quoted_escapes_are_refused(engine, calc_artifact, name):
    fix = (f"diff --git {name.replace('b/', 'a/', 1)} {name}\nnew file mode 100755\n--- /dev/null\n+++ {name}\n"
           "@@ -0,0 +1 @@\n+echo pwned\n")
    g = engine.grade_fix(calc_artifact, calc_artifact.metadata.repo, fix)
    assert not g.passed and ("escapes the repository" in g.reason or "inside .git" in g.reason), g.reason


# -- the canary: a fix that behaves only while it sees no canary, or knows the tests by name -------------

import textwrap  # noqa: E402

from fixtures.calc_pkg import MONKEYPATCH_REPORTS  # noqa: E402
from fixtures.solving import attempt  # noqa: E402

_FORCE = MONKEYPATCH_REPORTS.replace('rep.outcome = "passed"', 'rep.outcome = "passed" if _force(item) else rep.outcome')
KNOWN = sorted({t.split("::")[-1] for t in calc_pkg.ALL_TESTS})

# forge on the first run, behave honestly from the second on (state kept in /tmp and HOME)
SECOND_RUN_HONEST = textwrap.dedent('''
    import os
    _marks = [os.path.join(os.environ.get("TMPDIR", "/tmp"), ".calc-seen"), os.path.expanduser("~/.calc-seen")]
    _second = any(os.path.exists(m) for m in _marks)
    for _m in _marks:
        try:
            open(_m, "w").close()
        except OSError:
            pass

    def _force(item):
        return not _second
''') + _FORCE
# forge unless the test file holds a test whose name the task did not show (a canary)
HONEST_IF_UNKNOWN_TEST = textwrap.dedent(f'''
    import re
    _KNOWN = {KNOWN!r}
    _src = open("tests/test_ops.py").read()
    _unknown = [n for n in re.findall(r"def (test_\\w+)", _src) if n not in _KNOWN]

    def _force(item):
        return not _unknown
''') + _FORCE
# pass every test the task showed, leave every other test (a canary) alone
PASS_KNOWN_ONLY = textwrap.dedent(f'''
    _KNOWN = {KNOWN!r}

    def _force(item):
        return item.name.split("[")[0] in _KNOWN
''') + _FORCE
# the old canary's fixed name and comment
PASS_UNLESS_SSRKIT_NAMED = textwrap.dedent('''
    def _force(item):
        return "canary" not in item.name and "ssrkit" not in item.name
''') + _FORCE


@pytest.mark.parametrize("code", [SECOND_RUN_HONEST, HONEST_IF_UNKNOWN_TEST, PASS_KNOWN_ONLY,
                                  PASS_UNLESS_SSRKIT_NAMED],
                         ids=["second_run_honest", "honest_if_unknown_test", "pass_known_only", "pass_unless_named"])
def test_canary_aware_fixes_fail(engine, calc_artifact, code):
    rec, fix = attempt(engine, calc_artifact, {"src/calc/__init__.py": code})
    assert fix.strip()
    assert not rec["passed"], rec["reason"]
    assert rec["reason"].startswith("tampering"), rec["reason"]
    assert rec["canary"]["status"] in ("forged", "changed", "vanished"), rec["canary"]


def test_canary_is_shaped_like_the_files_tests():
    from ssrkit.verdict.canary import make_canary

    seen = set()
    for _ in range(20):
        c = make_canary(calc_pkg.TESTS.encode(), calc_pkg.ALL_TESTS, stem="test_ops")
        assert "ssrkit" not in c.text and "canary" not in c.text and "#" not in c.text
        assert c.name.startswith("test_") and c.name not in KNOWN
        assert c.sabotaged in KNOWN
        compile(c.text, "t.py", "exec")
        seen.add((c.name, c.text.index(f"def {c.name}")))
    assert len(seen) > 10  # names and places vary


def test_canary_name_holds_no_word_of_the_test_script():
    """pytest's `--deselect ID` drops every id starting with ID and `-k "not slow"` every name containing
    `slow`: a canary named from such words would never run (and looked forged, the CI failure of stop 21)."""
    from ssrkit.verdict.canary import make_canary

    src = "".join(f"def test_{n}():\n    assert 1\n\n\n" for n in ("mean", "mean_empty", "slow_path", "add"))
    script = "python -m pytest -rA --deselect tests/test_m.py::test_mean_empty -k 'not slow' tests/test_m.py\n"
    names = {make_canary(src.encode(), stem="test_m", avoid=script).name for _ in range(300)}
    assert not [n for n in names if n.startswith("test_mean_empty") or "slow" in n], names
    assert len(names) > 5 and any(n.startswith("test_mean") for n in names)  # the file's path is no word of it


def test_a_script_that_selects_tests_by_name_never_fails_an_honest_fix(engine, tmp_path, calc_pkg_repo):
    """The reference run on the original code uses the fix run's own canary file: a script that runs some
    names and not others cannot make a canary vanish with the fix but show on the original."""
    from ssrkit.solve.solvers import make_solver
    from fixtures.solving import validate

    art = calc_pkg.make_artifact(tmp_path / "by-name", calc_pkg_repo, select="-k 'add or clamp or mean or median'")
    assert validate(art)["valid"]
    recs = engine.solve([(art, art.metadata.repo)], make_solver("oracle"), attempts=4)
    assert all(r["passed"] for r in recs), [r["reason"] for r in recs]
    assert {r["canary"]["status"] for r in recs} == {"absent"}  # never named so that the script selects it


def test_home_and_tmp_are_fresh_after_every_reset(engine, calc_artifact):
    with engine.open(calc_artifact.metadata.repo) as sb:
        sb.run('echo x > "$HOME/mark" && echo y > "${TMPDIR:-/tmp}/mark"', timeout=30)
        assert sb.run('cat "$HOME/mark"', timeout=30).output.strip() == "x"
        sb.reset()
        res = sb.run('ls -A "$HOME" "${TMPDIR:-/tmp}" | grep -c mark', timeout=30)
        assert res.output.strip() == "0", res.output


# -- the answer is not readable while grading ------------------------------------------------------------

# at import of the package: find the original code in git history and put it in place before ops is imported
GIT_SHOW_ORIGINAL = textwrap.dedent('''
    import os, subprocess
    _here = os.path.dirname(os.path.abspath(__file__))
    for _rev in ("HEAD", "HEAD~1", "HEAD~2", "ORIG_HEAD"):
        _out = subprocess.run(["git", "show", _rev + ":src/calc/ops.py"], capture_output=True, text=True,
                              cwd=_here).stdout
        if "return hi" in _out:
            open(os.path.join(_here, "ops.py"), "w").write(_out)
            break
''')


def _reverse_artifact_bug(path: str) -> str:
    return textwrap.dedent(f'''
        import os, subprocess
        _root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if os.path.exists({path!r}):
            subprocess.run(["git", "apply", "-R", {path!r}], cwd=_root, capture_output=True)
    ''')


def test_original_history_is_not_in_the_grading_sandbox(engine, calc_artifact):
    rec, _ = attempt(engine, calc_artifact, {"src/calc/__init__.py": GIT_SHOW_ORIGINAL})
    assert not rec["passed"] and "FAIL_TO_PASS" in rec["reason"], rec["reason"]


@pytest.fixture
def artifact_in_home(calc_artifact):
    """A copy of the artifact in the user's HOME (not under /tmp, which is private in a sandbox anyway)."""
    import shutil
    import tempfile
    from pathlib import Path

    from ssrkit.store.artifact import Artifact

    base = Path(tempfile.mkdtemp(prefix="ssrkit-hostile-", dir=Path.home()))
    try:
        shutil.copytree(calc_artifact.path, base / "calc-bug")
        yield Artifact(base / "calc-bug")
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_artifact_is_not_readable_while_grading(engine, artifact_in_home, local_isolation):
    if local_isolation == "none":
        pytest.skip("without bubblewrap nothing is hidden (documented in docs/sandbox.md)")
    art = artifact_in_home
    rec, _ = attempt(engine, art, {"src/calc/__init__.py": _reverse_artifact_bug(str(art.path / "bug_inject.diff"))})
    assert not rec["passed"] and "FAIL_TO_PASS" in rec["reason"], rec["reason"]


# -- nothing outside the artifact is written or deleted ---------------------------------------------------

def _outside(tmp_path):
    victim = tmp_path / "victim"
    (victim / "001").mkdir(parents=True)
    (victim / "001" / "precious.txt").write_text("keep me\n")
    (victim / "precious.txt").write_text("keep me\n")
    return victim


def _untouched(victim) -> bool:
    files = sorted(str(p.relative_to(victim)) for p in victim.rglob("*"))
    return files == ["001", "001/precious.txt", "precious.txt"] and \
        (victim / "001" / "precious.txt").read_text() == "keep me\n"


@pytest.mark.parametrize("link", ["attempts", "attempts/001"])
def test_symlinked_attempts_are_refused(engine, calc_artifact, tmp_path, link):
    from ssrkit.errors import SsrkitError
    from ssrkit.solve.solvers import make_solver

    victim = _outside(tmp_path)
    target = victim if link == "attempts" else victim / "001"
    if link == "attempts/001":
        (calc_artifact.path / "attempts").mkdir(exist_ok=True)
    (calc_artifact.path / link).symlink_to(target, target_is_directory=True)
    with pytest.raises(SsrkitError, match="is a symlink"):
        engine.solve([(calc_artifact, calc_artifact.metadata.repo)], make_solver("null"), attempts=1, redo=True)
    assert _untouched(victim)
    if link == "attempts":
        with pytest.raises(SsrkitError, match="is a symlink"):
            engine.add_external(calc_artifact, calc_artifact.metadata.repo, "")
    else:  # a new attempt number, a real directory
        rec = engine.add_external(calc_artifact, calc_artifact.metadata.repo, "")
        assert rec["attempt"] == "002" and not (calc_artifact.path / "attempts" / "002").is_symlink()
    assert _untouched(victim)


def test_symlinked_logs_and_outputs_are_refused(calc_artifact, tmp_path):
    from ssrkit.errors import SsrkitError
    from ssrkit.validate import Report, write_report

    victim = _outside(tmp_path)
    (calc_artifact.path / "logs").rename(tmp_path / "old-logs") if (calc_artifact.path / "logs").exists() else None
    (calc_artifact.path / "logs").symlink_to(victim, target_is_directory=True)
    report = Report(artifact=str(calc_artifact.path), valid=False, checks=[], fail_to_pass=[], pass_to_pass=[],
                    logs={"logs/precious.txt": "overwritten\n"})
    with pytest.raises(SsrkitError, match="logs is a symlink"):
        write_report(calc_artifact, report)
    assert _untouched(victim)
    (calc_artifact.path / "logs").unlink()
    (calc_artifact.path / "reward.json").symlink_to(victim / "precious.txt")
    with pytest.raises(SsrkitError, match="reward.json is a symlink"):
        calc_artifact.write_json("reward.json", {})
    assert _untouched(victim)


def test_oversized_fix_gets_a_clear_verdict(engine, calc_artifact, calc_pkg_repo):
    from ssrkit.patch import MAX_DIFF_BYTES

    fix = diff_of(calc_pkg_repo, {"data.txt": "x" * 80 + "\n" * 1 + ("y" * 99 + "\n") * (MAX_DIFF_BYTES // 100 + 10)})
    g = engine.grade_fix(calc_artifact, calc_artifact.metadata.repo, fix)
    assert not g.passed and g.reason.startswith("the fix is too large") and "MiB limit" in g.reason, g.reason[:300]


# -- the same grading hacks on the docker backend ------------------------------------------------------

@pytest.fixture(scope="module")
def docker_calc(tmp_path_factory):
    """(artifact, image source) of the calc bug, validated against an image of the calc repository."""
    from ssrkit.store.artifact import Artifact
    from ssrkit.sandbox.image import build_image
    from ssrkit.sandbox.factory import docker_available
    from ssrkit.store.source import RepoSource
    from ssrkit.validate import Settings, Validator, validate_all

    why = docker_available()
    if why:
        pytest.skip(f"no Docker engine: {why}")
    base = tmp_path_factory.mktemp("docker-calc")
    repo = make_calc_pkg_repo(base / "calc")
    tag = build_image(repo, tag=f"ssrkit-test/calc-hostile:{abs(hash(str(repo))) % 10**8}")
    art = calc_pkg.make_artifact(base / "art", repo)
    (art.path / "test_script.sh").write_text(
        "#!/bin/bash\nexport PYTEST_DISABLE_PLUGIN_AUTOLOAD=1\npython3 -m pytest -rA -p no:cacheprovider tests/test_ops.py\n")
    art = Artifact(art.path)
    source = RepoSource.from_image(tag)
    [result] = validate_all([(art, source)], Validator(Settings(cache=False), backend="docker"), redo=True)
    assert result["valid"], result
    yield art, source
    import docker

    try:
        docker.from_env().images.remove(tag, force=True)
    except Exception:  # noqa: BLE001
        pass


@pytest.mark.docker
@pytest.mark.parametrize("code", [GIT_SHOW_ORIGINAL, PASS_KNOWN_ONLY, SECOND_RUN_HONEST],
                         ids=["git_show_original", "pass_known_only", "second_run_honest"])
def test_grading_hacks_fail_on_docker(docker_calc, code):
    from ssrkit.solve.grade import GradeSettings
    from ssrkit.solve import Engine, SolveOptions
    from ssrkit.solve.solvers import make_solver

    from fixtures.solving import ScriptedSolver

    art, source = docker_calc
    engine = Engine(SolveOptions(grade=GradeSettings(timeout=60), backend="docker"))
    [rec] = engine.solve([(art, source)], ScriptedSolver({"src/calc/__init__.py": code}), attempts=1, redo=True)
    assert not rec["passed"], rec["reason"]
    [oracle] = engine.solve([(art, source)], make_solver("oracle"), attempts=1, redo=True)
    assert oracle["passed"], oracle["reason"]


def test_canary_never_sabotages_a_test_marked_xfail_or_skip():
    from ssrkit.verdict.canary import make_canary

    src = ("import pytest\n\n\n@pytest.mark.xfail(reason='x')\ndef test_a():\n    assert 1 == 1\n\n\n"
           "@pytest.mark.skipif(False, reason='y')\ndef test_b():\n    assert 2 == 2\n\n\n"
           "def test_c():\n    assert 3 == 3\n")
    ids = ["t/test_m.py::test_a", "t/test_m.py::test_b", "t/test_m.py::test_c"]
    assert {make_canary(src.encode(), ids, stem="test_m").sabotaged for _ in range(30)} == {"test_c"}


def test_a_sabotaged_test_that_starts_with_a_decorated_function_still_parses():
    """toolz's memoize tests begin with `@memoize` over an inner function: the sabotage replaced the body from
    the `def` line on, left the decorator above the failing assertion, and the canary file did not parse, so
    the known test vanished and a right fix was graded "tampering" (6 seeds in 300)."""
    import ast
    import random

    from ssrkit.verdict.canary import make_canary

    src = ("from functools import lru_cache\n\n\n"
           "def test_cached():\n    @lru_cache\n    def f(x):\n        return x + 1\n\n    assert f(1) == 2\n\n\n"
           "def test_plain():\n    assert 3 == 3\n")
    ids = ["t/test_m.py::test_cached", "t/test_m.py::test_plain"]
    canaries = [make_canary(src.encode(), ids, stem="test_m", rng=random.Random(seed)) for seed in range(60)]
    assert {c.sabotaged for c in canaries} == {"test_cached", "test_plain"}
    for c in canaries:
        tree = ast.parse(c.text)
        cached = next(d for d in tree.body if getattr(d, "name", "") == "test_cached")
        if c.sabotaged == "test_cached":  # the whole body, decorator included, is the failing assertion
            assert len(cached.body) == 1 and isinstance(cached.body[0], ast.Assert)
            assert "lru_cache\n    def" not in c.text


@pytest.mark.parametrize("style", ["pytest", "dotted"])
def test_a_test_named_like_its_module_is_told_from_the_modules_other_tests(style):
    """`test_serializer` in `test_serializer.py` (itsdangerous has it): the module's name is in the path of
    every id of the file, and must not make each of them count as the sabotaged test. It did, so every
    honest fix whose canary sabotaged it was graded 'tampering' (the file's other tests pass)."""
    from ssrkit.verdict.canary import make_canary
    from ssrkit.testrun import TestRun

    src = ("class TestSerializer:\n    def test_serializer(self):\n        assert 1 == 1\n\n"
           "    def test_dumps(self):\n        assert 2 == 2\n\n\n"
           "def test_loads():\n    x = 1\n    assert x == 1\n")
    if style == "pytest":
        path = "tests/test_serializer/test_serializer.py"
        ids = [f"{path}::TestSerializer::test_serializer", f"{path}::TestSerializer::test_dumps",
               f"{path}::test_loads"]
    else:
        ids = ["tests.test_serializer.TestSerializer.test_serializer",
               "tests.test_serializer.TestSerializer.test_dumps", "tests.test_serializer.test_loads"]
    sabotaged = set()
    for _ in range(40):
        c = make_canary(src.encode(), ids, stem="test_serializer")
        sabotaged.add(c.sabotaged)
        victim = [t for t in ids if t.rsplit(":", 1)[-1].rsplit(".", 1)[-1] == c.sabotaged]
        run = TestRun(log="", exit_code=1, seconds=0.1, timed_out=False, truncated=False,
                      statuses={t: "failed" if t in victim else "passed" for t in ids})
        assert c.sabotaged_statuses(run) == {t: "failed" for t in victim}
    assert "test_serializer" in sabotaged
