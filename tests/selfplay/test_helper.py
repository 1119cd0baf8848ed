"""recipes/selfplay_helper.py: the run configuration it writes, the folders it lists, the policy it picks."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path

from fixtures.paths import FIXTURES, ROOT

spec = importlib.util.spec_from_file_location("selfplay_helper", ROOT / "recipes" / "selfplay_helper.py")
helper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helper)


def test_config_is_valid_toml_written_only_when_it_changes(tmp_path, capsys):
    base = tmp_path / "mine.toml"
    base.write_text('[validate]\ntimeout = 30\n\n[sandbox]\nenv = { A = "1" }\n')
    out = tmp_path / "run" / "ssrkit.toml"
    args = ["config", str(out), "--base", str(base), "--set", "run.repos=[\"/a b\", \"/c\"]",
            "--set", "run.model=Qwen/Qwen2.5-7B", "--set", "run.n=6", "--set", "reward.alpha=0.8",
            "--set", "run.serve=no", "--set", "validate.min_passing_tests=", "--set", 'solve.hide=["/r"]']
    assert helper.main(args) == 0
    data = tomllib.loads(out.read_text())
    assert data["run"] == {"repos": ["/a b", "/c"], "model": "Qwen/Qwen2.5-7B", "n": 6, "serve": "no"}
    assert data["validate"] == {"timeout": 30}  # an empty variable leaves ssrkit's default (or the profile's)
    assert data["sandbox"] == {"env": {"A": "1"}} and data["reward"] == {"alpha": 0.8}
    assert data["solve"] == {"hide": ["/r"]}
    mtime = out.stat().st_mtime_ns
    capsys.readouterr()
    assert helper.main(args) == 0 and out.stat().st_mtime_ns == mtime  # unchanged: not rewritten
    assert capsys.readouterr().out == ""
    assert helper.main(["config", str(out), "--set", "bad"]) == 2


def test_dirs_lists_folders_that_hold_artifacts(tmp_path, capsys):
    (tmp_path / "a" / "x").mkdir(parents=True)
    (tmp_path / "a" / "x" / "artifact.toml").write_text("")
    (tmp_path / "b" / ".staging" / "y").mkdir(parents=True)
    (tmp_path / "b" / ".staging" / "y" / "bug_inject.diff").write_text("")  # unfinished work only
    (tmp_path / "c").mkdir()
    helper.main(["dirs", *(str(tmp_path / d) for d in ("a", "b", "c", "missing"))])
    assert capsys.readouterr().out.split() == [str(tmp_path / "a")]
    helper.main(["dirs", "--as-option=--known", *(str(tmp_path / d) for d in ("a", "b", "missing"))])
    assert capsys.readouterr().out.split() == ["--known", str(tmp_path / "a")]


def test_a_rounds_higher_order_step_knows_what_earlier_rounds_made(tmp_path):
    """Round k passes the higher-order folders of rounds 1..k-1 as --known: a carried task failing the same way
    again does not make (validate, count) the same higher-order artifact again."""
    import subprocess

    run = tmp_path / "run"

    def dry(target: str) -> str:
        return subprocess.run(["make", "-n", "--no-print-directory", "-f", "recipes/selfplay.mk", str(run / target),
                               f"RUN={run}", "REPOS=/x/calc", "ROUNDS=3"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout

    assert "dirs --as-option=--known )" in dry("round-001/.done/higher-calc")
    assert f"dirs --as-option=--known {run}/round-001/higher/calc {run}/round-002/higher/calc)" in dry(
        "round-003/.done/higher-calc")
    assert "$known --max" in dry("round-003/.done/higher-calc")


def test_policy_is_the_newest_finished_checkpoint_of_an_earlier_round(tmp_path):
    run = tmp_path / "run"

    def ckpt(k: int, done: bool) -> Path:
        d = run / f"round-{k:03d}" / "policy"
        d.mkdir(parents=True)
        (d / "config.json").write_text("{}")
        (d / "trainer_state.json").write_text(json.dumps({"done": done, "step": 3}))
        return d

    assert helper.policy_for(run, 1, "/models/base") == "/models/base"
    first = ckpt(1, True)
    ckpt(2, False)  # killed mid-training: not a policy yet
    assert helper.policy_for(run, 3, "/models/base") == str(first.resolve())
    assert helper.policy_for(run, 1, "/models/base") == "/models/base"

    # the report's learning panel finds the policy that played a round by the same rule (ssrkit.learning)
    from ssrkit.learning import played_by

    (run / "ssrkit.toml").write_text('[run]\npolicy = "/models/base"\n')
    (run / "round-003").mkdir()
    for n in (1, 2, 3):
        assert played_by(run, n) == helper.policy_for(run, n, "/models/base"), n


def test_server_moves_in_place_with_nccl_and_restarts_otherwise(tmp_path, capfd, monkeypatch):
    """`server ensure` starts `ssrkit serve --detach --strategy S`; a new checkpoint restarts it (restart) or goes
    through `ssrkit serve --refresh` (nccl) — which, with no vLLM or GPU here, fails with its one-line reason and
    leaves the recorded server as it was."""
    import socket
    import sys

    fake = FIXTURES / "fake_vllm.py"
    run = tmp_path / "run"
    ssrkit = f"{sys.executable} -m ssrkit"
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    a, b = tmp_path / "ckpt-a", tmp_path / "ckpt-b"
    for c in (a, b):
        c.mkdir()
        (c / "config.json").write_text("{}")

    def ensure(checkpoint, strategy):
        return helper.main(["server", "ensure", "--run", str(run), "--checkpoint", str(checkpoint), "--port",
                            str(port), "--command", f"{sys.executable} {fake} serve", "--timeout", "20",
                            "--ssrkit", ssrkit, "--strategy", strategy])

    state_file = run / "serve" / "server.json"
    try:
        assert ensure(a, "nccl") == 0
        first = json.loads(state_file.read_text())
        assert first["strategy"] == "nccl"
        recorded = json.loads((run / "serve" / "vllm.pid.json").read_text())
        assert recorded["strategy"] == "nccl" and "--weight-transfer-config" in recorded["args"]
        assert ensure(a, "nccl") == 0  # same checkpoint: nothing to do
        capfd.readouterr()
        assert ensure(b, "nccl") == 2  # in place: the refresh runs and says why it cannot push from here
        out, err = capfd.readouterr()
        assert "refreshing the server" in out and "nccl strategy pushes weights from a CUDA GPU" in err
        assert json.loads(state_file.read_text()) == first  # still the server of checkpoint a
        assert ensure(b, "restart") == 0  # another strategy: a new server
        second = json.loads(state_file.read_text())
        assert second["checkpoint"] == str(b) and second["pgid"] != first["pgid"]
    finally:
        helper.main(["server", "stop", "--run", str(run), "--ssrkit", ssrkit])
    assert not state_file.exists()


def test_continuous_warns_only_when_nothing_refreshes_the_server():
    """BASE_URL without SERVE=yes: a warning, unless the trainer is told which servers to refresh (servers started
    with `ssrkit serve --detach`, e.g. `--replicas`, as docs/cluster.md sets them up)."""
    assert "nothing refreshes the server" in helper.refresh_warning("", "--lora --groups-per-step 2")
    assert helper.refresh_warning("", "--lora --refresh-pid-file vllm-8000.pid") is None
    assert helper.refresh_warning("", "--refresh-pid-file=vllm-8000.pid") is None
    assert helper.refresh_warning("--port 8000 --name policy", "") is None
