"""Verdicts that point the right way (issue 31, item 4): when the parser finds no test, the message says the
cause the log names (a plugin option, a missing command, CRLF line endings); a parser's crash says its line
and keeps its stderr; an invalid artifact still records what bug_breaks measured."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fixtures.paths import EXAMPLES
from fixtures.repos import copy_artifact
from ssrkit.store.artifact import Artifact
from ssrkit.store.source import RepoSource
from ssrkit.validate import Settings, Validator, validate_all

VALID = "textkit/valid-slug-truncate-off-by-one"
TESTS = "tests/test_slug.py tests/test_case.py"


def validate_variant(tmp_path: Path, repo: Path, *, script: str | None = None, parser: str | None = None) -> dict:
    """The verdict on the valid example with its test_script.sh or test_parser.py replaced."""
    art = copy_artifact(EXAMPLES / "artifacts" / VALID, tmp_path / "art")
    if script is not None:
        (art / "test_script.sh").write_bytes(script.encode())
    if parser is not None:
        (art / "test_parser.py").write_text(parser)
    [result] = validate_all([(Artifact(art), RepoSource.local(repo))], Validator(Settings()))
    return result


def parser_check(result: dict) -> str:
    check = next(c for c in result["checks"] if c["name"] == "parser")
    assert check["status"] == "failed" and not result["valid"], check
    return check["message"]


@pytest.mark.parametrize("script, cause", [
    (f"#!/usr/bin/env bash\npython -m pytest -rA -p no:cacheprovider --cov=textkit {TESTS} 2>&1\n",
     # the runner's name in its usage error depends on the pytest version: __main__.py or python -m pytest
     r"the test runner rejected an option \('(__main__\.py|python -m pytest): error: unrecognized arguments: "
     r"--cov=textkit'\): a plugin test_script\.sh relies on is not installed where the tests run \(e\.g\. "
     r"pytest-cov for --cov, "),
    (f"#!/usr/bin/env bash\nssrkit-no-such-runner -rA {TESTS} 2>&1\n",
     r"a command test_script\.sh runs was not found \(exit code 127: "),
    (f"#!/usr/bin/env bash\r\npython -m pytest -rA -p no:cacheprovider {TESTS} 2>&1\r\n",
     r"test_script\.sh has Windows line endings \(CRLF\)"),
], ids=["plugin-option", "missing-command", "crlf"])
def test_no_test_parsed_says_what_the_log_names(tmp_path, example_repos, script, cause):
    message = parser_check(validate_variant(tmp_path, example_repos["textkit"], script=script))
    assert message.startswith("test_parser.py found no test in the original run's log (exit code ")
    assert re.search(cause, message), message
    assert "prints a per-test log" not in message  # not the generic advice: the cause is known
    assert message.endswith(str(tmp_path / "art" / "logs" / "original.log"))


def test_a_parser_that_does_not_compile_names_its_line_and_keeps_its_stderr(tmp_path, example_repos):
    parser = "import sys\n\ndef parse(:\n    pass\n"
    result = validate_variant(tmp_path, example_repos["textkit"], parser=parser)
    message = parser_check(result)
    assert "test_parser.py exited with code 1: SyntaxError: " in message
    assert "(test_parser.py line 3)" in message
    kept = tmp_path / "art" / "logs" / "original.parser-stderr.log"
    assert message.endswith(f"; its stderr: {kept}")
    assert "SyntaxError" in kept.read_text() and "line 3" in kept.read_text()


def test_an_invalid_artifact_keeps_the_fail_to_pass_tests_bug_breaks_found(tmp_path, example_repos):
    """`--json` of an artifact that fails weaken_hides had fail_to_pass [] although bug_breaks found them."""
    rel = "textkit/invalid-weaken_hides"
    art = copy_artifact(EXAMPLES / "artifacts" / rel, tmp_path / "art")
    [result] = validate_all([(Artifact(art), RepoSource.local(example_repos["textkit"]))], Validator(Settings()))
    assert not result["valid"]
    want = json.loads((EXAMPLES / "artifacts" / "fail_to_pass.json").read_text())[rel]
    assert result["fail_to_pass"] == sorted(want) and result["pass_to_pass"]
    assert json.loads((art / "validation.json").read_text())["fail_to_pass"] == sorted(want)
