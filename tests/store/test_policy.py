"""store/policy.py: the policy version record and the served-name grammar (issue #28 item 1)."""

from __future__ import annotations

import json

import pytest

from ssrkit.store.policy import (PolicyError, alias, child_version, parse_alias, read_version, root_version,
                                 write_version)


def test_alias_round_trips_and_rejects_other_names():
    for step in (0, 12, 999999, 1234567):
        v = child_version(None, step)
        assert parse_alias(alias(v)) == {"step": step, "id": v.id}
    for name in ("policy-3", "ssrkit-policy-s12-3f2a9c1e0b7d", "ssrkit-policy-s000012-3F2A9C1E0B7D",
                 "ssrkit-policy-s000012-3f2a9c1e0b7", "x-ssrkit-policy-s000012-3f2a9c1e0b7d", ""):
        assert parse_alias(name) is None, name


def test_versions_chain_and_read_back(tmp_path):
    assert read_version(tmp_path) is None
    root = root_version()
    assert (root.step, root.parent, root.lineage) == (0, None, root.id)
    child = child_version(child_version(root, 3), 2)
    assert child.step == 5 and child.lineage == root.id and child.id != root.id
    write_version(tmp_path, child, created="2026-12-04T10:00:00Z")
    assert read_version(tmp_path) == child


def test_a_bad_record_names_the_file_and_field(tmp_path):
    (tmp_path / "policy.json").write_text(json.dumps({"format": "ssrkit.policy/1", "step": "x", "id": "ab" * 6}))
    with pytest.raises(PolicyError, match=r"policy\.json: field 'step'"):
        read_version(tmp_path)
    (tmp_path / "policy.json").write_text("{")
    with pytest.raises(PolicyError, match="cannot read"):
        read_version(tmp_path)
