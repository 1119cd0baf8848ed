"""`ssrkit inject --agent llm` end to end: scripted OpenAI server → real local sandboxes → validated artifacts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from fixtures.agents import make_by_turn, tiny_injector_steps
from fixtures.paths import SRC


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200", "OPENAI_API_KEY": "sk-test-secret-123"}
    return subprocess.run([sys.executable, "-m", "ssrkit", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_llm_injections_are_validated_kept_and_resumable(tiny_repo, serve, tmp_path):
    server = serve(make_by_turn(tiny_injector_steps))
    out = tmp_path / "out"
    args = ["inject", str(tiny_repo), "--agent", "llm", "--base-url", server.base_url, "--model", "scripted-model",
            "--n", "2", "--out", str(out), "--strategy", "removal", "--json"]
    res = cli(*args)
    assert res.returncode == 0, res.stderr
    records = json.loads(res.stdout)
    assert [r["valid"] for r in records] == [True, True]
    assert all(r["strategy"] == "removal" and not r["reused"] for r in records)
    for r in records:
        d = Path(r["path"])
        assert (d / "validation.json").is_file() and (d / "trajectory.json").is_file()
        assert "sk-test-secret-123" not in "".join(p.read_text(errors="replace") for p in d.rglob("*") if p.is_file())
    summary = json.loads((out / "inject.json").read_text())
    assert summary["by_strategy"]["removal"]["valid"] == 2
    asked = len(server.requests)

    again = cli(*args)
    assert again.returncode == 0
    assert all(r["reused"] for r in json.loads(again.stdout))
    assert len(server.requests) == asked  # nothing was asked of the model twice


def test_unknown_strategy_for_llm_is_a_usage_error(tiny_repo, tmp_path):
    res = cli("inject", str(tiny_repo), "--agent", "llm", "--base-url", "http://127.0.0.1:9/v1", "--model", "m",
              "--out", str(tmp_path), "--strategy", "expression")
    assert res.returncode == 2 and "unknown LLM injection strategy" in res.stderr
