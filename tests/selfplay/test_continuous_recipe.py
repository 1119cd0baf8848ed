"""`make -f recipes/selfplay.mk continuous` (issue #28 item 3): producers play rounds again and again against a
model server while `ssrkit train --follow RUN` (the tiny model, on the CPU) trains on their groups; the helper
stops everything when MAX_ROUNDS are played and the report shows the trainer's steps. The scripted server lists
no policy version (a server not started by `ssrkit serve`), so the rollouts' versions are unknown: kept, warned.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from fixtures.paths import ROOT
from fixtures.recipe import KEY, PROFILE, recipe_cmd, recipe_env, start_server
from fixtures.repos import make_calc_repo

pytest.importorskip("torch")


def test_continuous_producers_and_a_following_trainer(tmp_path):
    from ssrkit.store import follow as store
    from ssrkit.train.tiny import save_tiny_model

    repo = make_calc_repo(tmp_path / "calc", profile=PROFILE)
    run, policy = tmp_path / "run", save_tiny_model(tmp_path / "policy")
    server, url = start_server("m", tmp_path)
    try:
        env = {**recipe_env(), "OPENAI_API_KEY": KEY, "CUDA_VISIBLE_DEVICES": ""}
        proc = subprocess.run(recipe_cmd(run, [repo], "MODE=model", "N=2", "ATTEMPTS=2", "JOBS=1", "MAX_ROUNDS=2",
                                         "CHUNK=1", f"BASE_URL={url}", "MODEL=m", f"POLICY={policy}",
                                         f"TRAIN_LAUNCH={sys.executable} -m ssrkit train",
                                         "FOLLOW_ARGS=--groups-per-step 1 --poll 0.5 --lr 1e-3",
                                         target="continuous"),
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    finally:
        server.terminate()
        server.wait(timeout=10)

    assert (run / "round-002" / ".done" / "end").is_file() and not (run / "round-003").exists()
    trainer = int((run / "follow" / "trainer.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(trainer, 0)
    log = (run / "follow" / "train.log").read_text()
    assert "stopped by a signal at a step boundary" in log or "step " in log, log[-2000:]
    lines = store.read_ledger(run)
    trained = [t["id"] for line in lines for t in line["trained"]]
    assert trained and len(trained) == len(set(trained)), log[-2000:]
    assert "did not report its policy" in log  # a plain server: versions unknown, said once
    assert not (run / "round-001" / "policy").exists()  # rounds did not train
    toml = (run / "ssrkit.toml").read_text()
    assert "follow_policy = true" in toml
    report = subprocess.run([sys.executable, "-m", "ssrkit", "report", str(run), "--json", "--no-plots",
                             "--no-learning"], capture_output=True, text=True, env=recipe_env(), cwd=ROOT)
    assert json.loads(report.stdout)["continuous"]["totals"]["trained"] == len(trained)


def test_continuous_stop_needs_only_the_run(tmp_path):
    """`make -f recipes/selfplay.mk continuous-stop RUN=...`, as recipes/README.md writes it: no REPOS needed; a
    run directory that does not exist is said, not created."""
    cmd = ["make", "-s", "-f", str(ROOT / "recipes" / "selfplay.mk"), "continuous-stop"]
    proc = subprocess.run([*cmd, f"RUN={tmp_path}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and (tmp_path / "STOP").is_file(), proc.stderr
    assert "the trainer stops at a step boundary" in proc.stdout
    proc = subprocess.run([*cmd, f"RUN={tmp_path / 'missing'}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no such run directory" in proc.stderr and not (tmp_path / "missing").exists()
