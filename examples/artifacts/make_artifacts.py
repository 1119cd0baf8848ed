#!/usr/bin/env python3
"""Regenerate the example artifacts in this folder.

    python examples/artifacts/make_artifacts.py         # rewrite every artifact
    python tests/helpers/manual_check.py                # then verify them

Each artifact is described below as exact text edits; the edits are made in a
working copy of the materialized example repository (at HEAD) and the diffs are
what ``git diff`` prints for them.  The committed artifact files are the source
of truth; this script documents how they were made and rebuilds them after a
change to the example repositories.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "src"))

from ssrkit.examples import materialize  # noqa: E402

TEMPLATES = ROOT / "src" / "ssrkit" / "templates"

# ---------------------------------------------------------------- edits used by several artifacts

SLUG_OFF_BY_ONE = ("src/textkit/slug.py", "        if len(candidate) > max_length:\n", "        if len(candidate) >= max_length:\n")
DROP_SLUG_REGRESSION = (
    "tests/test_slug.py",
    '''

def test_truncate_keeps_word_ending_exactly_at_limit():
    # regression: a word ending exactly at max_length used to be dropped
    assert slugify("ab cd ef", max_length=5) == "ab-cd"
''',
    "",
)
CLOSEST_TIE = ("src/textkit/distance.py", "        if best is None or distance < best_distance:\n", "        if best is None or distance <= best_distance:\n")
DROP_TIE_TEST = (
    "tests/test_distance.py",
    '''def test_closest_first_wins_a_tie():
    assert closest("cat", ["bat", "rat"]) == "bat"


''',
    "",
)
ACRONYM = (
    "src/textkit/case.py",
    '''      [A-Z]+(?=[A-Z][a-z])   # an acronym followed by a capitalised word: HTTPServer
    | [A-Z]?[a-z]+           # a capitalised or lower-case word
    | [A-Z]+                 # a trailing acronym
''',
    '''      [A-Z]?[a-z]+           # a capitalised or lower-case word
    | [A-Z]+                 # an acronym
''',
)
DROP_ACRONYM_TEST = (
    "tests/test_case.py",
    '''

@pytest.mark.parametrize(
    "name, expected",
    [
        ("HTTPServer", "http_server"),
        ("parseXMLDocument", "parse_xml_document"),
        ("getURL", "get_url"),
    ],
)
def test_acronym_followed_by_word(name, expected):
    # regression: "HTTPServer" used to become "https_erver"
    assert to_snake(name) == expected
''',
    "",
)
DEFAULT_FILTER = (
    "src/textkit/template.py",
    '            if value is _MISSING or value is None or value == "":\n',
    "            if value is _MISSING:\n",
)
WEAKEN_DEFAULT_FILTER = (
    "tests/test_template.py",
    '''    assert render("{{ nick|default:anonymous }}", {"nick": ""}) == "anonymous"
''',
    "",
)
AS_OF = ("ledger/journal.py", "            if as_of is not None and entry.date > as_of:\n", "            if as_of is not None and entry.date >= as_of:\n")
DROP_AS_OF_TEST = (
    "tests/test_journal.py",
    '''    def test_balance_as_of_includes_that_day(self):
        # regression: entries dated exactly on as_of used to be ignored
        self.assertEqual(self.journal.balance("Assets:Cash", as_of=date(2024, 1, 5)), Decimal("45.80"))

''',
    "",
)
NEGATIVE_ZERO = ("ledger/money.py", "    negative = value < 0\n", "    negative = value.is_signed()\n")
DROP_NEGATIVE_ZERO_TEST = (
    "tests/test_money.py",
    '''
    def test_negative_zero_after_rounding(self):
        # regression: tiny negative amounts used to print as "-$0.00"
        self.assertEqual(format_amount(Decimal("-0.004"), "USD"), "$0.00")
        self.assertEqual(format_amount(Decimal("-0.4"), "JPY", accounting=True), "¥0")
''',
    "",
)
AMORTIZATION = (
    "ledger/interest.py",
    "        amount = balance + interest if period == months else fixed\n",
    "        amount = fixed\n",
)
DROP_FINAL_PAYMENT_TEST = (
    "tests/test_interest.py",
    '''
    def test_final_payment_clears_the_loan(self):
        # regression: rounding used to leave a few cents outstanding
        self.assertEqual(self.rows[-1].balance, Decimal("0.00"))
        self.assertEqual(sum(row.principal for row in self.rows), Decimal("1000.00"))
        self.assertEqual(self.rows[-1].payment, Decimal("88.84"))
''',
    "",
)
SIMPLE_INTEREST_360 = (
    "ledger/interest.py",
    "def simple_interest(principal: Number, annual_rate: Number, days: int, day_count: int = 365, code: str = \"USD\") -> Decimal:\n",
    "def simple_interest(principal: Number, annual_rate: Number, days: int, day_count: int = 360, code: str = \"USD\") -> Decimal:\n",
)


def pytest_script(*files, verbose=False):
    flags = "-rA -v" if verbose else "-rA"
    return f"#!/usr/bin/env bash\npython -m pytest {flags} -p no:cacheprovider {' '.join(files)} 2>&1\n"


def unittest_script(*modules):
    return f"#!/usr/bin/env bash\npython -m unittest -v {' '.join(modules)} 2>&1\n"


PYTEST = (TEMPLATES / "pytest_parser.py").read_text()
UNITTEST = (TEMPLATES / "unittest_parser.py").read_text()

GARBAGE_PARSER = '''#!/usr/bin/env python3
"""Summarise a pytest log (prints counts, not the per-test JSON map)."""
import re
import sys

log = sys.stdin.read()
counts = {word: len(re.findall(r"^" + word + r" ", log, re.M)) for word in ("PASSED", "FAILED", "ERROR")}
print("tests run:", sum(counts.values()))
for word, n in counts.items():
    print(f"{word.lower()}: {n}")
'''

DUPLICATE_KEYS_PARSER = '''#!/usr/bin/env python3
"""Collect test statuses from a `pytest -rA -v` log.

Writes the JSON by hand, one member per status line. Every test appears in the
progress lines and again in the short summary, so each key is written twice.
"""
import re
import sys

STATUS = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped"}
members = []
for line in sys.stdin.read().splitlines():
    progress = re.match(r"^(\\S+::\\S+) (PASSED|FAILED|ERROR|SKIPPED)\\b", line)
    summary = re.match(r"^(PASSED|FAILED|ERROR) (\\S+::\\S+)", line)
    if progress:
        members.append((progress.group(1), STATUS[progress.group(2)]))
    elif summary:
        members.append((summary.group(2), STATUS[summary.group(1)]))
print("{" + ", ".join('"%s": "%s"' % (test, status) for test, status in members) + "}")
'''

# ---------------------------------------------------------------- artifact table
# name: repo, bug edits, weaken edits, script, test files, parser, options

ARTIFACTS = {
    # ---------------- textkit, valid
    "textkit/valid-slug-truncate-off-by-one": dict(
        bug=[SLUG_OFF_BY_ONE],
        weaken=[DROP_SLUG_REGRESSION],
        files=["tests/test_slug.py", "tests/test_case.py"],
        parser=PYTEST,
    ),
    "textkit/valid-closest-tie-order": dict(
        bug=[CLOSEST_TIE],
        weaken=[DROP_TIE_TEST],
        files=["tests/test_distance.py"],
        parser=PYTEST,
    ),
    "textkit/valid-two-files-acronym-and-default-filter": dict(
        bug=[ACRONYM, DEFAULT_FILTER],
        weaken=[DROP_ACRONYM_TEST, WEAKEN_DEFAULT_FILTER],
        files=["tests/test_case.py", "tests/test_template.py"],
        parser=PYTEST,
    ),
    "textkit/valid-total-break-syntax-error": dict(
        bug=[("src/textkit/wrap.py", "def fill(text: str, width: int = 70, **options) -> str:\n", "def fill(text: str, width: int = 70, **options) -> str\n")],
        weaken=[
            ("tests/test_wrap.py", '''def test_fill_joins_lines():
    assert fill(FOX, 20) == "The quick brown fox\\njumps over the lazy\\ndog"


''', ""),
        ],
        files=["tests/test_wrap.py", "tests/test_tokenize.py"],
        parser=PYTEST,
    ),
    # ---------------- textkit, invalid
    "textkit/invalid-files": dict(
        bug=[SLUG_OFF_BY_ONE],
        weaken=[DROP_SLUG_REGRESSION],
        files=["tests/test_slug.py", "tests/test_case.py"],
        parser=None,  # test_parser.py is missing
    ),
    "textkit/invalid-files-empty-weaken": dict(
        bug=[CLOSEST_TIE],
        weaken=[],  # test_weaken.diff is empty
        files=["tests/test_distance.py"],
        parser=PYTEST,
    ),
    "textkit/invalid-diffs_parse": dict(
        bug=[SLUG_OFF_BY_ONE],
        weaken=[DROP_SLUG_REGRESSION],
        files=["tests/test_slug.py", "tests/test_case.py"],
        parser=PYTEST,
        bug_path_rewrite=("src/textkit/slug.py", "../textkit/src/textkit/slug.py"),
    ),
    "textkit/invalid-bug_scope": dict(
        bug=[("tests/conftest.py", '    "It wasn\'t the first time! Did the dog care? "\n', '    "It wasn\'t the first time. Did the dog care? "\n')],
        weaken=[
            ("tests/test_tokenize.py", '''def test_sentences(sample_text):
    assert sentences(sample_text) == [
        "The quick brown fox jumps over the lazy dog.",
        "It wasn't the first time!",
        "Did the dog care?",
        "Nobody knows, e.g. the farmer's well-known cat.",
    ]


''', ""),
        ],
        files=["tests/test_tokenize.py", "tests/test_wrap.py"],
        parser=PYTEST,
    ),
    "textkit/invalid-parser-garbage": dict(
        bug=[CLOSEST_TIE],
        weaken=[DROP_TIE_TEST],
        files=["tests/test_distance.py"],
        parser=GARBAGE_PARSER,
    ),
    "textkit/invalid-parser-duplicate-keys": dict(
        bug=[CLOSEST_TIE],
        weaken=[DROP_TIE_TEST],
        files=["tests/test_distance.py"],
        parser=DUPLICATE_KEYS_PARSER,
        verbose=True,
    ),
    "textkit/invalid-original_passes": dict(
        bug=[CLOSEST_TIE],
        weaken=[DROP_TIE_TEST],
        files=["tests/test_distance.py"],
        parser=PYTEST,
        script=pytest_script(
            "tests/test_distance.py::test_closest",
            "tests/test_distance.py::test_closest_first_wins_a_tie",
            "tests/test_distance.py::test_closest_respects_max_distance",
            "tests/test_distance.py::test_closest_no_candidates",
        ),
    ),
    "textkit/invalid-weaken_hides": dict(
        bug=[ACRONYM],
        weaken=[("tests/test_case.py", '''def test_to_constant():
    assert to_constant("maxRetryCount") == "MAX_RETRY_COUNT"


''', "")],
        files=["tests/test_case.py"],
        parser=PYTEST,
    ),
    # ---------------- ledger, valid
    "ledger/valid-journal-as-of-boundary": dict(
        bug=[AS_OF],
        weaken=[DROP_AS_OF_TEST],
        files=["tests/test_journal.py", "tests/test_accounts.py"],
        parser=UNITTEST,
    ),
    "ledger/valid-negative-zero-pytest-runner": dict(
        bug=[NEGATIVE_ZERO],
        weaken=[DROP_NEGATIVE_ZERO_TEST],
        files=["tests/test_money.py"],
        parser=PYTEST,
        runner="pytest",
    ),
    "ledger/valid-remove-csvimport-module": dict(
        bug=[("ledger/csvimport.py", None, None)],  # delete the module
        weaken=[("tests/test_csvimport.py", None, None)],  # and its tests
        files=["tests/test_csvimport.py", "tests/test_journal.py"],
        parser=UNITTEST,
    ),
    "ledger/valid-amortization-partial-weaken": dict(
        bug=[AMORTIZATION],
        weaken=[DROP_FINAL_PAYMENT_TEST],  # test_zero_rate_schedule keeps failing: allowed
        files=["tests/test_interest.py", "tests/test_money.py"],
        parser=UNITTEST,
    ),
    # ---------------- ledger, invalid
    "ledger/invalid-test_files_exist": dict(
        bug=[AS_OF],
        weaken=[DROP_AS_OF_TEST],
        files=["tests/test_journal.py", "tests/test_accounts.py", "tests/test_ledger.py"],
        parser=UNITTEST,
        script=unittest_script("tests.test_journal", "tests.test_accounts"),
    ),
    "ledger/invalid-weaken_scope": dict(
        bug=[AS_OF],
        weaken=[
            DROP_AS_OF_TEST,
            ("tests/test_accounts.py", '''    def test_is_under(self):
        account = Account("Assets:Bank:Checking", AccountType.ASSET)
        self.assertTrue(account.is_under("Assets"))
        self.assertTrue(account.is_under("Assets:Bank:Checking"))
        self.assertFalse(account.is_under("Assets:Ban"))

''', ""),
        ],
        files=["tests/test_journal.py"],
        parser=UNITTEST,
    ),
    "ledger/invalid-applies": dict(
        bug=[("ledger/interest.py", "        repaid = amount - interest\n", "        repaid = amount - interest - Decimal(\"0.01\")\n")],
        bug_base="HEAD~3",  # made on an old checkout: the context no longer matches HEAD
        weaken=[DROP_FINAL_PAYMENT_TEST],
        files=["tests/test_interest.py"],
        parser=UNITTEST,
    ),
    "ledger/invalid-bug_breaks": dict(
        bug=[SIMPLE_INTEREST_360],
        weaken=[("tests/test_money.py", '''    def test_weighted(self):
        self.assertEqual(allocate(Decimal("0.05"), [3, 7]), [Decimal("0.02"), Decimal("0.03")])

''', "")],
        files=["tests/test_money.py", "tests/test_currency.py"],
        parser=UNITTEST,
    ),
    "ledger/invalid-inverse_mutation": dict(
        bug=[AS_OF, SIMPLE_INTEREST_360],
        weaken=[DROP_AS_OF_TEST],
        files=["tests/test_journal.py", "tests/test_accounts.py"],
        parser=UNITTEST,
    ),
    "ledger/invalid-original_passes-failing-test": dict(
        bug=[AS_OF],
        weaken=[DROP_AS_OF_TEST],
        files=["tests/test_journal.py", "tests/test_accounts.py"],
        parser=UNITTEST,
        # a module that does not exist is reported as a failing test on the original code
        script=unittest_script("tests.test_journal", "tests.test_accounts", "tests.test_account"),
    ),
}


def git(repo: Path, *args: str) -> str:
    # ignore the user's git configuration (diff.algorithm, diff.noprefix, ...) so that
    # the diffs come out the same for everyone
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    return subprocess.run(
        ["git", "-c", "core.autocrlf=false", "-c", "core.quotepath=false", *args],
        cwd=repo, check=True, capture_output=True, text=True, env=env,
    ).stdout


def diff(repo: Path, edits, base: str = "HEAD") -> str:
    work = Path(tempfile.mkdtemp(prefix="ssr-art-"))
    try:
        copy = work / repo.name
        shutil.copytree(repo, copy, symlinks=True)
        git(copy, "checkout", "-q", "--detach", base)
        for path, old, new in edits:
            target = copy / path
            if old is None:
                target.unlink()
                continue
            text = target.read_text()
            if text.count(old) != 1:
                raise SystemExit(f"{path}: edit does not match exactly once: {old[:60]!r}")
            target.write_text(text.replace(old, new))
        git(copy, "add", "-A")
        return git(
            copy, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-renames", "--diff-algorithm=myers",
            "--indent-heuristic", "-U3", "--src-prefix=a/", "--dst-prefix=b/",
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def build(name: str, spec: dict, repo: Path, root: Path = HERE) -> None:
    out = root / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    bug = diff(repo, spec["bug"], spec.get("bug_base", "HEAD"))
    if "bug_path_rewrite" in spec:
        old, new = spec["bug_path_rewrite"]
        bug = bug.replace(f"a/{old}", f"a/{new}").replace(f"b/{old}", f"b/{new}")
    weaken = diff(repo, spec["weaken"]) if spec["weaken"] else ""
    files = spec["files"]
    if "script" in spec:
        script = spec["script"]
    elif spec.get("runner", "pytest" if repo.name == "textkit" else "unittest") == "pytest":
        script = pytest_script(*files, verbose=spec.get("verbose", False))
    else:
        script = unittest_script(*(f[:-3].replace("/", ".") for f in files))
    (out / "bug_inject.diff").write_text(bug)
    (out / "test_weaken.diff").write_text(weaken)
    (out / "test_script.sh").write_text(script)
    (out / "test_script.sh").chmod(0o755)
    (out / "test_files.txt").write_text("".join(f + "\n" for f in files))
    if spec["parser"] is not None:
        (out / "test_parser.py").write_text(spec["parser"])


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("names", nargs="*", help="artifacts to rebuild (default: all)")
    parser.add_argument("--out", type=Path, default=HERE, help="write here instead of next to this script")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ssr-repos-") as tmp:
        repos = {p.name: p for p in materialize(ROOT / "examples" / "repos", Path(tmp))}
        for name in args.names or list(ARTIFACTS):
            build(name, ARTIFACTS[name], repos[name.split("/")[0]], args.out)
            print("wrote", name)


if __name__ == "__main__":
    main()
