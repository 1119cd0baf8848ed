"""Shared by the executor tests: a sample of example artifacts and what must not depend on the executor."""

from __future__ import annotations

import json
from pathlib import Path

from fixtures.repos import EXAMPLES, copy_artifact
from ssrkit.artifact import Artifact, Metadata
from ssrkit.source import RepoSource

EXPECTED = json.loads((EXAMPLES / "artifacts" / "expected.json").read_text())
#: a mix of verdicts: valid ones (one multi-file), and failures of a static and of each execution check
SAMPLE = ["textkit/valid-slug-truncate-off-by-one", "textkit/valid-two-files-acronym-and-default-filter",
          "textkit/invalid-bug_scope", "textkit/invalid-weaken_hides", "textkit/invalid-original_passes",
          "ledger/valid-journal-as-of-boundary", "ledger/invalid-bug_breaks", "ledger/invalid-test_files_exist"]


def sample_items(example_repos, dest: Path, names=SAMPLE, *, record_repo: bool = False
                 ) -> list[tuple[Artifact, RepoSource]]:
    """Copies of example artifacts under `dest` with their repository; `record_repo` writes it into an
    artifact.toml too, so the CLI finds it (the examples carry none)."""
    items = []
    for rel in names:
        art = Artifact(copy_artifact(EXAMPLES / "artifacts" / rel, dest / rel))
        source = RepoSource.local(example_repos[rel.split("/")[0]])
        if record_repo:
            art.write_metadata(Metadata(repo=source))
        items.append((art, source))
    return items


def verdict(result: dict) -> tuple:
    """What must not depend on the executor: validity, each check's status, FAIL_TO_PASS and PASS_TO_PASS."""
    return (result["valid"], [(c["name"], c["status"]) for c in result["checks"]], result["fail_to_pass"],
            result["pass_to_pass"], sorted(result["warnings"]))
