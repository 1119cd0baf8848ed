"""The learning panel of `ssrkit report` on a two-round run that trained (real trainer, the tiny model): per round
and role, reward, solve rate, KL to the first policy and the sampler/trainer gap; kept in learning.json; a round
sampled with other weights than its policy's shows a gap that says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from fixtures.training import conversation, make_trajectory, write_artifact  # noqa: E402

from ssrkit.runs.report import build_report  # noqa: E402
from ssrkit.train.config import TrainConfig  # noqa: E402
from ssrkit.train.loop import train  # noqa: E402

pytestmark = pytest.mark.train


def write_round(run: Path, n: int, tok, logprobs_from: Path) -> Path:
    """Round n's rollouts: an artifact with three solver attempts and an injection, their log-probs from
    `logprobs_from` (the weights the server held)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(logprobs_from).eval()
    root = run / f"round-{n:03d}" / "inject" / "demo"
    attempts = [(make_trajectory(tok, conversation(f"r{n}a{i}", 1, letters), logprobs_model=model), i == 0)
                for i, letters in enumerate(["AB", "CD", "EF"])]
    injection = make_trajectory(tok, conversation(f"r{n}inj", 1, "GH"), role="injector", logprobs_model=model)
    write_artifact(root, f"art{n}", attempts, injector=(injection, 0.5))
    return root


def play_round(run: Path, n: int, tok, sampler: Path) -> None:
    """Round n sampled by `sampler`, then its training from `sampler` (the recipe's --model) to round-n/policy."""
    root = write_round(run, n, tok, sampler)
    cfg = TrainConfig(model=str(sampler), out=str(run / f"round-{n:03d}" / "policy"), lr=1e-3, grad_accum=1,
                      micro_batch_size=4, roles=["solver"])
    train(cfg, [root])


@pytest.fixture(scope="module")
def run(tmp_path_factory, tiny_model_dir, tiny_tok) -> Path:
    run = tmp_path_factory.mktemp("run")
    play_round(run, 1, tiny_tok, tiny_model_dir)
    play_round(run, 2, tiny_tok, run / "round-001" / "policy")
    return run


def panel(report: dict) -> dict[tuple[int, str], dict]:
    return {(r["round"], r["role"]): r for r in report["learning"]}


def test_reward_solve_rate_kl_and_gap_per_round_and_role(run, monkeypatch):
    rows = panel(build_report(run))
    assert set(rows) == {(1, "solver"), (1, "injector"), (2, "solver"), (2, "injector")}
    for n in (1, 2):
        solver, injector = rows[(n, "solver")], rows[(n, "injector")]
        assert solver["reward_mean"] == pytest.approx(-1 / 3, abs=1e-4) and solver["solve_rate"] == pytest.approx(1 / 3, abs=1e-4)
        assert injector["reward_mean"] == 0.5 and injector["solve_rate"] == pytest.approx(1 / 3, abs=1e-4)
        for row in (solver, injector):
            assert row["tokens"] > 0 and row["gap"] <= 1e-4, row  # sampled by the weights that trained on it
    assert rows[(1, "solver")]["kl"] < 1e-6  # round 1 is the first policy
    assert rows[(2, "solver")]["kl"] > 1e-3 and rows[(2, "injector")]["kl"] > 1e-3  # round 2's moved away

    kept = json.loads((run / "round-002" / "learning.json").read_text())
    assert kept["sampler"] == str(run / "round-001" / "policy") and kept["roles"]["solver"]["tokens"] > 0
    import ssrkit.train.agreement as agreement

    monkeypatch.setattr(agreement, "logprob_agreement", lambda *a, **k: pytest.fail("measured again"))
    assert panel(build_report(run)) == rows  # read back from learning.json


def test_a_round_served_by_stale_weights_shows_a_gap(tmp_path, tiny_model_dir, tiny_tok, run):
    """Round 2 sampled by the first policy although it trained from round 1's: a refresh that kept serving the
    old weights. Its gap is the distance between the two policies, not float rounding."""
    import shutil

    stale = tmp_path / "run"
    shutil.copytree(run, stale, ignore=shutil.ignore_patterns("learning.json"))
    shutil.rmtree(stale / "round-002" / "inject")
    write_round(stale, 2, tiny_tok, tiny_model_dir)
    rows = panel(build_report(stale))
    assert rows[(1, "solver")]["gap"] <= 1e-4 and rows[(2, "solver")]["gap"] > 1e-2, rows


def test_report_prints_and_plots_the_panel_and_says_what_it_could_not_measure(run, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import ssrkit.learning as learning
    from ssrkit.cli.main import app

    result = CliRunner().invoke(app, ["report", str(run), "--plots", str(tmp_path / "plots")])
    assert result.exit_code == 0, result.output
    assert "learning" in result.output and "KL to first" in result.output and "injector" in result.output
    assert (tmp_path / "plots" / "learning.png").stat().st_size > 0

    for name in ("round-001", "round-002"):
        (run / name / "learning.json").unlink()
    monkeypatch.setattr(learning, "can_measure", lambda: False)
    report = build_report(run)
    assert all(r["kl"] is None and r["gap"] is None for r in report["learning"])
    assert report["learning"][0]["reward_mean"] is not None
    assert report["learning_note"] == "KL and gap need torch and transformers: pip install 'ssrkit[train]'"
    assert build_report(run, learning=False)["learning_note"] == "KL and gap not measured (--no-learning)"


def test_agreement_reads_rollout_files_and_estimates_kl(run, tmp_path, tiny_model_dir, tiny_tok):
    """`logprob_agreement` on a rollout file: the gap to the weights that sampled it is float rounding, and its KL
    to other weights is the k3 estimate exp(d) - 1 - d (d = their log-prob - the sampler's) over the same tokens."""
    from transformers import AutoModelForCausalLM

    from ssrkit.rollout_file import rollout_record, write_rollouts
    from ssrkit.train.agreement import logprob_agreement

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    trajectories = [make_trajectory(tiny_tok, conversation(f"k{i}", 2), logprobs_model=model) for i in range(2)]
    path = write_rollouts(tmp_path / "r.jsonl", [rollout_record(t, role="echo", group="g", reward=i)
                                                 for i, t in enumerate(trajectories)])
    same = logprob_agreement(tiny_model_dir, [path])
    assert set(same) == {"echo", "all"} and same["all"].tokens > 20
    assert same["all"].max_abs < 1e-5 and same["all"].kl < 1e-9

    other = AutoModelForCausalLM.from_pretrained(run / "round-001" / "policy").eval()
    expected, n = 0.0, 0
    for t in trajectories:
        for turn in t["turns"]:
            ids, start = turn["prompt_token_ids"] + turn["completion_token_ids"], len(turn["prompt_token_ids"])
            with torch.no_grad():
                logp = torch.log_softmax(other(input_ids=torch.tensor([ids])).logits[0, :-1].double(), -1)
            for j, lp in enumerate(turn["logprobs"]):
                d = float(logp[start - 1 + j, ids[start + j]]) - lp
                expected, n = expected + (torch.tensor(d).exp().item() - 1 - d), n + 1
    moved = logprob_agreement(run / "round-001" / "policy", [path])["all"]
    assert moved.tokens == n and moved.kl == pytest.approx(expected / n, rel=1e-4) and moved.kl > 1e-3


def test_a_round_that_cannot_be_measured_leaves_the_report_standing(run, tmp_path):
    """Token ids the checkpoint does not have (a server that served another model): the round's KL and gap stay
    blank, the note says why, the rest of the report is there."""
    import shutil

    broken = tmp_path / "run"
    shutil.copytree(run, broken, ignore=shutil.ignore_patterns("learning.json"))
    for path in (broken / "round-002").rglob("trajectory.json"):
        t = json.loads(path.read_text())
        t["turns"][0]["completion_token_ids"][0] = 10**6
        path.write_text(json.dumps(t))
    report = build_report(broken)
    rows = panel(report)
    assert rows[(1, "solver")]["gap"] is not None and rows[(2, "solver")]["gap"] is None
    assert rows[(2, "solver")]["reward_mean"] is not None
    assert report["learning_note"].startswith("round 2 not measured (IndexError"), report["learning_note"]
