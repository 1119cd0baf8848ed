"""A remote unit's files come back with the node's paths replaced by the driver's in ssrkit's own records
only (issue 30): model output and raw logs are the driver's byte for byte, whatever paths they hold."""

from __future__ import annotations

import json
import tomllib

import pytest
import tomli_w

from ssrkit.store.fsutil import json_text
from ssrkit.executor.units import relabel_bytes

pytestmark = pytest.mark.fast

NODE_ART, DRIVER_ART = "/tmp/ssrkit-unit-x1/art-0001", "/home/ana/runs/r1/art-0001"
NODE_REPO, DRIVER_REPO = "/root/.cache/ssrkit/repos/4f2a/textkit", "/home/ana/src/textkit"
MAPPING = {NODE_ART: DRIVER_ART, NODE_REPO: DRIVER_REPO}


def unit_files() -> dict[str, bytes]:
    """What a solve attempt and an injection on a node return, each file naming the node's paths."""
    trajectory = {"messages": [{"role": "assistant", "content": f"cat {NODE_REPO}/textkit/slug.py"},
                               {"role": "tool", "content": f"{NODE_ART}/test_script.sh: ok"}],
                  "turns": [{"token_ids": [101, 7, 42], "text": f"cd {NODE_REPO}"}]}
    return {
        "trajectory.json": json_text(trajectory).encode(),
        "fix.diff": (f"--- a/conf.py\n+++ b/conf.py\n@@ -1 +1 @@\n-ROOT = '{NODE_REPO}'\n+ROOT = '.'\n").encode(),
        "test_output.log": f"rootdir: {NODE_REPO}\n".encode(),
        "logs/bug.log": f"{NODE_REPO}/tests/test_slug.py:3: AssertionError\n".encode(),
        "test_script.sh": f"#!/usr/bin/env bash\ncd {NODE_REPO} && pytest -rA\n".encode(),
        "validation.json": json_text({"artifact": NODE_ART, "source": {"kind": "local", "path": NODE_REPO},
                                      "checks": [{"message": f"see {NODE_ART}/logs/bug.log"}]}).encode(),
        "eval.json": json_text({"artifact": NODE_ART, "reason": f"graded in {NODE_REPO}"}).encode(),
        "artifact.toml": tomli_w.dumps({"id": "art-0001", "repository": NODE_REPO}).encode(),
    }


def test_only_the_records_are_relabeled():
    files = unit_files()
    out = relabel_bytes(files, MAPPING)
    assert set(out) == set(files)
    for rel in ("trajectory.json", "fix.diff", "test_output.log", "logs/bug.log", "test_script.sh"):
        # model output and raw logs: untouched
        assert out[rel] == files[rel], rel
    validation = json.loads(out["validation.json"])
    assert validation == {"artifact": DRIVER_ART, "source": {"kind": "local", "path": DRIVER_REPO},
                          "checks": [{"message": f"see {DRIVER_ART}/logs/bug.log"}]}
    assert json.loads(out["eval.json"]) == {"artifact": DRIVER_ART, "reason": f"graded in {DRIVER_REPO}"}
    assert tomllib.loads(out["artifact.toml"].decode())["repository"] == DRIVER_REPO


def test_a_trajectory_keeps_the_text_its_token_ids_encode():
    """The template path trains on a trajectory's messages: an edited message would no longer be the text
    its stored token ids encode."""
    files = unit_files()
    assert relabel_bytes(files, MAPPING)["trajectory.json"] == files["trajectory.json"]


def test_records_are_relabeled_string_by_string_and_written_as_ssrkit_writes_them():
    """A path JSON writes escaped (a quote, a backslash) is still found; a record that is not what ssrkit
    writes there is left as it is."""
    odd = '/tmp/ssrkit-unit-"q"\\x/art'
    files = {"validation.json": json_text({"artifact": odd}).encode(), "eval.json": b"{not json"}
    out = relabel_bytes(files, {odd: DRIVER_ART})
    assert out["validation.json"] == json_text({"artifact": DRIVER_ART}).encode()
    assert out["eval.json"] == b"{not json"
    assert relabel_bytes(files, {}) == files
