"""The example artifacts are complete, documented, and their verdicts in expected.json hold."""

import importlib.util
import json
import re

import pytest

from fixtures.paths import EXAMPLES, FIXTURES, SRC

ARTIFACTS = EXAMPLES / "artifacts"
TEMPLATES = SRC / "ssrkit" / "templates"
CHECKS = [
    "files",
    "diffs_parse",
    "test_files_exist",
    "weaken_scope",
    "bug_scope",
    "applies",
    "parser",
    "original_passes",
    "bug_breaks",
    "weaken_hides",
    "inverse_mutation",
]
FIVE = ["bug_inject.diff", "test_weaken.diff", "test_script.sh", "test_files.txt", "test_parser.py"]

EXPECTED = json.loads((ARTIFACTS / "expected.json").read_text())
F2P = json.loads((ARTIFACTS / "fail_to_pass.json").read_text())


def on_disk():
    return sorted(str(p.relative_to(ARTIFACTS)) for p in ARTIFACTS.glob("*/*") if p.is_dir())


def test_expected_covers_every_artifact():
    assert sorted(EXPECTED) == on_disk()
    assert set(F2P) <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_expected_entry_shape(name):
    entry = EXPECTED[name]
    assert set(entry) == {"valid", "fails", "warnings"}
    assert entry["valid"] == (entry["fails"] is None)
    assert entry["fails"] is None or entry["fails"] in CHECKS
    assert all(w in {"total_break"} for w in entry["warnings"])
    assert name.split("/")[1].startswith("valid-" if entry["valid"] else "invalid-")
    assert f"`{name}`" in (ARTIFACTS / "INDEX.md").read_text()


def test_every_check_has_an_invalid_example():
    assert {e["fails"] for e in EXPECTED.values() if e["fails"]} == set(CHECKS)
    assert sum(e["valid"] for n, e in EXPECTED.items() if n.startswith("textkit/")) >= 2
    assert sum(e["valid"] for n, e in EXPECTED.items() if n.startswith("ledger/")) >= 2
    assert any("total_break" in e["warnings"] and e["valid"] for e in EXPECTED.values())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parsers_are_template_copies(name):
    parser = ARTIFACTS / name / "test_parser.py"
    if not parser.exists() or "invalid-parser" in name:
        return
    templates = {(TEMPLATES / f).read_text() for f in ("pytest_parser.py", "unittest_parser.py")}
    assert parser.read_text() in templates


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_diffs_look_like_git_diffs(name):
    for diff in ("bug_inject.diff", "test_weaken.diff"):
        text = (ARTIFACTS / name / diff).read_text()
        if not text:
            continue
        assert text.startswith("diff --git a/")
        assert re.search(r"^@@ -\d+(,\d+)? \+\d+(,\d+)? @@", text, re.M)


def load_checker():
    spec = importlib.util.spec_from_file_location("manual_check", FIXTURES / "manual_check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_reference_checker_agrees_with_expected(tmp_path, capsys):
    """Runs every check of SPEC §2 on every artifact (about 100 test runs, 40-70 s).

    Marked slow: run it after changing the example repositories, the artifacts or
    the parser templates (``pytest -m slow tests/test_example_artifacts.py``).
    """
    checker = load_checker()
    out = tmp_path / "f2p.json"
    rc = checker.main(["--write-f2p", str(out)])
    report = capsys.readouterr().out
    assert rc == 0, report
    assert json.loads(out.read_text()) == F2P


def test_generator_reproduces_the_committed_artifacts(tmp_path):
    spec = importlib.util.spec_from_file_location("make_artifacts", ARTIFACTS / "make_artifacts.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(["--out", str(tmp_path)])
    made = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(str(p.relative_to(ARTIFACTS)) for p in ARTIFACTS.glob("*/*/*") if p.is_file())
    assert made == committed
    for rel in made:
        assert (tmp_path / rel).read_bytes() == (ARTIFACTS / rel).read_bytes(), rel
