"""recipes/selfplay.mk in model mode: LLM injector and solver agents against scripted OpenAI-compatible servers.

Everything is real except the model: the recipe, the ssrkit commands, the HTTP servers, the agents' bash and
edit tools in local sandboxes, validation, grading, higher-order bugs, the report. The scripted model
(scripted_selfplay.py) writes real bugs into the calc repository and real fixes, one right and one wrong per
artifact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from fixtures.paths import FIXTURES, ROOT
from fixtures.recipe import KEY, PROFILE, SCRIPT, recipe_cmd, recipe_env, run_recipe, start_server
from fixtures.repos import make_calc_repo

def files_under(d: Path) -> list[Path]:
    return [p for p in d.rglob("*") if p.is_file()]


def test_a_model_round_with_two_models(tmp_path):
    """One round, the injector on one endpoint and the solver on another (two models, one variable each)."""
    repo = make_calc_repo(tmp_path / "calc", profile=PROFILE)
    run = tmp_path / "run"
    inj, inj_url = start_server("injector-model", tmp_path)
    sol, sol_url = start_server("solver-model", tmp_path)
    try:
        env = {**recipe_env(), "OPENAI_API_KEY": KEY}
        proc = subprocess.run(recipe_cmd(run, [repo], "MODE=model", "ROUNDS=1", "N=2", "ATTEMPTS=2", "JOBS=1",
                                         f"INJECT_BASE_URL={inj_url}", "INJECT_MODEL=injector-model",
                                         f"SOLVE_BASE_URL={sol_url}", "SOLVE_MODEL=solver-model"),
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finally:
        for p in (inj, sol):
            p.terminate()
            p.wait(timeout=10)

    rd = run / "round-001"
    arts = sorted(p.parent for p in (rd / "inject" / "calc").glob("*/artifact.toml"))
    assert len(arts) == 2
    for a in arts:
        meta = tomllib.loads((a / "artifact.toml").read_text())
        assert meta["injector"]["agent"] == "llm" and meta["injector"]["model"] == "injector-model"
        traj = json.loads((a / "trajectory.json").read_text())
        assert traj["exit_status"] == "submitted"
        assert "run them (`tests/test_calc.py::test_mean_empty`)" in traj["messages"][1]["content"]  # the profile
        assert json.loads((a / "validation.json").read_text())["valid"]
        evals = [json.loads(e.read_text()) for e in sorted(a.glob("attempts/*/eval.json"))]
        assert [e["passed"] for e in evals] == [True, False]  # one attempt at a time: right fix, wrong fix
        for d in sorted(a.glob("attempts/*")):
            traj = json.loads((d / "trajectory.json").read_text())
            assert traj["role"] == "solver" and traj["model"] == "solver-model" and traj["exit_status"] == "submitted"
    higher = sorted(p.parent for p in (rd / "higher" / "calc").glob("*/artifact.toml"))
    assert len(higher) == 2  # each wrong fix, stacked on its bug
    assert all(json.loads((h / "validation.json").read_text())["valid"] for h in higher)
    assert all(tomllib.loads((h / "artifact.toml").read_text())["order"] == 2 for h in higher)

    report = json.loads((run / "report.json").read_text())
    r1 = report["rounds"][0]
    assert (r1["injected"], r1["valid"], r1["attempts"], r1["solved"], r1["higher_order"]) == (2, 2, 4, 2, 2)
    assert r1["injector_reward_mean"] == pytest.approx(1 - 1.8 * 0.5)  # solve rate 1/2 for both bugs
    assert report["pool"]["active"] == 4  # two first-order, two higher-order
    cfg = tomllib.loads((run / "ssrkit.toml").read_text())["run"]
    assert (cfg["inject_model"], cfg["solve_model"], cfg["solve_base_url"]) == ("injector-model", "solver-model",
                                                                                 sol_url)
    # the roles really went to their own servers, and the API key reached them but nothing on disk
    requests = {m: (tmp_path / f"{m}.jsonl").read_text().splitlines() for m in ("injector-model", "solver-model")}
    bodies = [json.loads(line)["body"] for line in requests["injector-model"]]
    assert all(b["model"] == "injector-model" for b in bodies if b is not None)  # None: GET /v1/models
    assert len(requests["solver-model"]) >= 4 * 3
    for p in files_under(run):
        assert KEY not in p.read_bytes().decode("utf-8", "replace"), p

    # SFT export: the chat transcripts of the passing LLM attempts
    out = tmp_path / "sft.jsonl"
    subprocess.run([sys.executable, "-m", "ssrkit", "export", str(run), "--format", "sft", "--out", str(out)],
                   env=recipe_env(), check=True, capture_output=True)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 2 and {r["attempt"] for r in records} == {"001"}
    for r in records:
        roles = [m["role"] for m in r["messages"]]
        assert roles[:2] == ["system", "user"] and "assistant" in roles and r["model"] == "solver-model"
        assert "I am improving the test suite" in r["messages"][1]["content"]


@pytest.mark.xdist_group("ranks")  # under xdist: beside no other multi-process torch run
def test_rounds_train_and_serve_the_new_policy(tmp_path):
    """SERVE=yes TRAIN=yes: round 1 serves POLICY, training writes round-001/policy, round 2 serves that."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from ssrkit.train.tiny import save_tiny_model

    repo = make_calc_repo(tmp_path / "calc", profile=PROFILE)
    policy = save_tiny_model(tmp_path / "policy0")
    run = tmp_path / "run"
    served = tmp_path / "served.log"
    env = {**recipe_env(), "SCRIPTED_VLLM_SCRIPT": str(SCRIPT), "SCRIPTED_VLLM_LOG": str(served)}
    port = 20000 + os.getpid() % 20000
    args = ["MODE=model", "SERVE=yes", f"POLICY={policy}", f"SERVE_PORT={port}", "SERVE_TIMEOUT=60",
            f"SERVE_COMMAND={sys.executable} {FIXTURES / 'scripted_vllm.py'}", "TRAIN=yes",
            "TRAIN_ARGS=--micro-batch-size 4 --grad-accum 1", "ROUNDS=2", "N=2", "ATTEMPTS=2", "JOBS=1"]
    try:
        t0 = time.monotonic()
        proc = subprocess.run(recipe_cmd(run, [repo], *args), cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=400)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        took = time.monotonic() - t0
    finally:
        subprocess.run(recipe_cmd(run, [repo], *args, target="stop-server"), cwd=ROOT, env=env,
                       capture_output=True)

    ckpt1, ckpt2 = run / "round-001" / "policy", run / "round-002" / "policy"
    for c in (ckpt1, ckpt2):
        assert json.loads((c / "trainer_state.json").read_text())["done"] and (c / "model.safetensors").is_file()
    assert served.read_text().splitlines() == [str(Path(policy).resolve()), str(ckpt1.resolve())]
    assert not (run / "serve" / "server.json").exists()  # stopped at the end of the run
    r2 = json.loads((run / "report.json").read_text())["rounds"][1]
    assert r2["tasks"] == 4 and r2["attempts"] == 8  # 2 new + 2 carried from the pool
    assert list((run / "round-002" / "tasks" / "calc").iterdir())
    # a finished run re-checks in seconds and serves nothing
    t0 = time.monotonic()
    run_recipe(run, [repo], *args)
    assert time.monotonic() - t0 < min(20, took / 3)
    assert len(served.read_text().splitlines()) == 2


@pytest.mark.xdist_group("ranks")  # under xdist: beside no other multi-process torch run
@pytest.mark.timeout(900)
def test_lora_rounds_train_adapters_and_hot_swap_them(tmp_path):
    """SERVE=yes SERVE_STRATEGY=lora TRAIN=yes: training writes an adapter, the server hot-swaps it in (no
    restart), and round 2's agents talk to the adapter by its new name."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from ssrkit.train.tiny import save_tiny_model

    repo = make_calc_repo(tmp_path / "calc", profile=PROFILE)
    policy = save_tiny_model(tmp_path / "policy0")
    run = tmp_path / "run"
    served = tmp_path / "served.log"
    env = {**recipe_env(), "SCRIPTED_VLLM_SCRIPT": str(SCRIPT), "SCRIPTED_VLLM_LOG": str(served)}
    port = 20000 + (os.getpid() + 7) % 20000
    args = ["MODE=model", "SERVE=yes", f"POLICY={policy}", f"SERVE_PORT={port}", "SERVE_TIMEOUT=60",
            f"SERVE_COMMAND={sys.executable} {FIXTURES / 'scripted_vllm.py'}", "SERVE_STRATEGY=lora", "TRAIN=yes",
            "TRAIN_ARGS=--micro-batch-size 4 --grad-accum 1 --lora-rank 4", "ROUNDS=2", "N=2", "ATTEMPTS=2", "JOBS=1"]
    try:
        proc = subprocess.run(recipe_cmd(run, [repo], *args), cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=400)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finally:
        subprocess.run(recipe_cmd(run, [repo], *args, target="stop-server"), cwd=ROOT, env=env,
                       capture_output=True)
    adapter = run / "round-001" / "policy"
    assert (adapter / "adapter_config.json").is_file() and not (adapter / "model.safetensors").exists()
    assert served.read_text().splitlines() == [str(Path(policy).resolve()), str(adapter.resolve())]  # one start
    round2 = [json.loads(p.read_text()) for p in (run / "round-002").rglob("trajectory.json")]
    from ssrkit.store.policy import alias, read_version

    # round 2's agents asked for the adapter by its versioned name (step 1 of the lineage policy0 began)
    version = read_version(adapter)
    assert version is not None and version.step == 1
    assert round2 and {t["model"] for t in round2} == {alias(version)}
