"""End to end on CPU: LLM solver attempts from the scripted OpenAI server (vLLM-style token ids and
log-probs) → graded → rewarded → `ssrkit train` → a checkpoint whose log-probabilities of the attempts moved
with their advantages (successful attempts more likely, failed ones less)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from fixtures.paths import EXAMPLES, SRC  # noqa: E402
from fixtures.repos import copy_artifact  # noqa: E402
from fixtures.scripted_server import ScriptedServer, bash, submit  # noqa: E402
from fixtures.training import row_logprob_sums  # noqa: E402

from ssrkit.store.artifact import Artifact  # noqa: E402
from ssrkit.patch import reverse  # noqa: E402

pytestmark = pytest.mark.train
ARTIFACT = "textkit/valid-slug-truncate-off-by-one"


def cli(*args, env=None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": "", "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ssrkit", *map(str, args)], capture_output=True, text=True,
                          env=full, timeout=900)


def solver_rule(fix_diff: str):
    """Even-numbered conversations fix the bug (apply the reverse of bug_inject.diff); odd ones give up."""
    state = {"conversations": 0}

    def rule(messages, request):
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn == 0:
            state["conversations"] += 1
        good = state["conversations"] % 2 == 1
        if good and turn == 0:
            return bash(f"cat > /tmp/fix.diff <<'SSRKIT_EOF'\n{fix_diff}SSRKIT_EOF\ngit apply /tmp/fix.diff && git diff --stat",
                        "The slug is cut one character short; restore the bound.")
        if not good and turn == 0:
            return bash("python -m pytest -q -x 2>&1 | tail -3", "Let me look at the failures.")
        return submit("Done.")

    return rule


def test_scripted_rollouts_train_a_checkpoint(tmp_path, example_repos, tiny_model_dir, tiny_tok):
    from ssrkit.train.advantages import compute_advantages
    from ssrkit.train.examples import build_examples
    from ssrkit.train.rollouts import read_rollouts

    repo = example_repos["textkit"]
    art = copy_artifact(EXAMPLES / "artifacts" / ARTIFACT, tmp_path / "arts" / "slug")
    env = {"SSRKIT_CACHE": str(tmp_path / "cache")}
    assert cli("validate", art, "--repo", repo, env=env).returncode == 0

    server = ScriptedServer(solver_rule(reverse(Artifact(art).bug_diff)), token_ids="vllm").start()
    try:
        res = cli("solve", art, "--repo", repo, "--solver", "llm", "--base-url", server.base_url, "--model",
                  "scripted-model", "--attempts", "4", "--token-ids", "--json", env=env)
    finally:
        server.stop()
    assert res.returncode == 0, res.stderr[-2000:]
    res = cli("reward", art, "--json", env=env)
    reward = json.loads(res.stdout)[0]
    assert reward["n_attempts"] == 4 and reward["n_solved"] == 2, reward
    trajectory = json.loads((art / "attempts" / "001" / "trajectory.json").read_text())
    assert trajectory["turns"][0]["completion_token_ids"] and trajectory["turns"][0]["logprobs"]

    out = tmp_path / "ckpt"
    res = subprocess.run([sys.executable, "-m", "ssrkit", "train", str(tmp_path / "arts"), "--model", str(tiny_model_dir),
                          "--out", str(out), "--lr", "1e-4", "--grad-accum", "1", "--epochs", "4", "--roles", "solver",
                          # the scripted server's log-probs are toy numbers, not the tiny model's: ratios against
                          # them would be ~0 and clip every negative-advantage token, so start from the current policy
                          "--old-logprobs", "current", "--is-correction", "none"],
                         capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PYTHONPATH": str(SRC), "CUDA_VISIBLE_DEVICES": ""})
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / "config.json").is_file() and any(out.glob("*.safetensors"))
    assert "stored" in res.stderr  # the sampler's token ids were used, not a re-rendering

    scan = read_rollouts([tmp_path / "arts"])
    advantages = compute_advantages(scan.rollouts).advantages
    examples, _ = build_examples([(r, a) for r, a in zip(scan.rollouts, advantages) if a is not None], tiny_tok, 32768)
    assert len(examples) >= 4
    before = row_logprob_sums(tiny_model_dir, examples)
    after = row_logprob_sums(out, examples)
    moved = [(e.advantage, b, a) for e, b, a in zip(examples, before, after)]
    assert all((a - b) * adv > 0 for adv, b, a in moved), moved
