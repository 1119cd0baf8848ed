"""The learning panel of `ssrkit report`: per round and role, how the policy that played the round did and how far
it had moved from the first policy.

- mean reward: the role's rewards of the round (solver: every attempt; injector: its new artifacts);
- solve rate: solver: solved attempts / attempts; injector: the mean solve rate of its valid new artifacts;
- KL to the first policy: KL(round's policy || first policy) per sampled token, estimated from the round's own
  trajectories (`ssrkit.train.agreement`: the k3 estimate over every token that carries a sampler log-prob);
- sampler/trainer gap: max |trainer - sampler| log-prob over the same tokens, the trainer computing them with the
  checkpoint that sampled the round (near 1e-6 when the server really served it, with processed log-probs).

Which checkpoint played round N is what the training after round N started from: `model` in
`RUN/round-NNN/policy/train_config.toml` (the recipes train each round's policy from the one that played it);
for a round that did not train, the recipes' rule (`played_by`); the first policy is the earliest round's. Both
take a forward pass of two checkpoints over the round's trajectories, so they are computed once, when torch and
transformers are installed (`ssrkit[train]`), and kept in `RUN/round-NNN/learning.json` with the checkpoints and
the trajectory count they came from (a later report recomputes them only when those change).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

from .errors import SsrkitError
from .runs.pool import round_artifacts
from .store import trajectory as fmt
from .store.artifact import TRAJECTORY
from .store.attempts import current_reward
from .store.config import CONFIG_NAME, read_toml
from .store.fsutil import atomic_write_json, read_json
from .store.hf_checkpoint import TRAIN_CONFIG, finished_training
from .store.runs import INJECT, LEARNING, POLICY_DIR, round_dir

log = logging.getLogger("ssrkit.report")
ROLES = ("solver", "injector")


def played_by(run: Path, round_no: int) -> str | None:
    """The checkpoint that played round `round_no`: the one its training started from (`model` of its
    train_config.toml); for a round that did not train, the recipes' rule (`policy_for` in
    recipes/selfplay_helper.py, which keeps to the standard library; tests/selfplay/test_helper.py holds the two
    together): the newest checkpoint an earlier round finished, else the run's initial policy ([run] policy of
    RUN/ssrkit.toml). None when the run names no policy (offline, or a model it does not train)."""
    path = round_dir(run, round_no) / POLICY_DIR / TRAIN_CONFIG
    if path.is_file():
        from .train.config import resolve_config

        try:
            return resolve_config(path).model or None
        except SsrkitError:
            return None
    for k in range(round_no - 1, 0, -1):
        if finished_training(round_dir(run, k) / POLICY_DIR):
            return str((round_dir(run, k) / POLICY_DIR).resolve())
    try:
        initial = read_toml(Path(run) / CONFIG_NAME).get("run", {}).get("policy")
    except SsrkitError:
        return None
    return str(initial) if initial else None


def _role_numbers(run: Path, round_no: int, metrics: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Mean reward and solve rate per role, from the round's metrics and its new artifacts."""
    rewards = [current_reward(a) for a in round_artifacts(run, round_no, (INJECT,))[INJECT]]
    injector_rates = [float(r["solve_rate"]) for r in rewards
                      if r and r.get("valid") and r.get("n_attempts")]  # as round_metrics counts
    return {
        "solver": {"reward_mean": metrics.get("solver_reward_mean"), "solve_rate": metrics.get("solve_rate")},
        "injector": {"reward_mean": metrics.get("injector_reward_mean"),
                     "solve_rate": round(sum(injector_rates) / len(injector_rates), 4) if injector_rates else None},
    }


def can_measure() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))


def _kept(folder: Path, key: dict[str, Any]) -> dict[str, Any] | None:
    """learning.json's measures when they were made from the inputs `key` names, else None."""
    kept = read_json(folder / LEARNING) if (folder / LEARNING).is_file() else None
    if isinstance(kept, dict) and all(kept.get(k) == v for k, v in key.items()):
        return kept["roles"]
    return None


def _with_logprobs(folder: Path) -> bool:
    """Whether any trajectory of the round holds a sampler log-prob (else there is nothing to compare)."""
    for path in folder.rglob(TRAJECTORY):
        data = fmt.read_or_none(path)
        turns = (data or {}).get("turns") or []
        if not isinstance(turns, list):
            continue
        if any(isinstance(t, dict) and t.get("logprobs") for t in turns):
            return True
    return False


def _measure(folder: Path, key: dict[str, Any]) -> dict[str, Any]:
    """KL to the first policy and the gap to the sampler per role, computed and kept in learning.json."""
    from .train.agreement import logprob_agreement

    if not _with_logprobs(folder):  # a server that returned no log-probs: no checkpoint to load
        atomic_write_json(folder / LEARNING, {**key, "roles": {}})
        return {}
    log.info("%s: measuring KL to %s and the sampler/trainer gap on %d trajectories", folder.name, key["first"],
             key["trajectories"])
    served = logprob_agreement(key["sampler"], [folder])
    start = served if key["first"] == key["sampler"] else logprob_agreement(key["first"], [folder])
    roles = {role: {"kl": _finite(start[role].kl), "gap": served[role].max_abs, "tokens": served[role].tokens}
             for role in ROLES if role in served and served[role].tokens}
    atomic_write_json(folder / LEARNING, {**key, "roles": roles})
    return roles


def _finite(value: float) -> float | None:
    return None if value != value else round(value, 6)


def _round_measures(run: Path, n: int, sampler: str | None, first: str, measure: bool,
                    missing: set[str]) -> dict[str, Any]:
    """The round's kept measures, or new ones when `measure` allows; what stood in the way goes to `missing`."""
    if not sampler:
        return {}
    folder = round_dir(run, n)
    key = {"sampler": sampler, "first": first, "trajectories": sum(1 for _ in folder.rglob(TRAJECTORY))}
    kept = _kept(folder, key)
    if kept is not None:
        return kept
    if not measure:
        missing.add("KL and gap not measured (--no-learning)")
    elif not can_measure():
        missing.add("KL and gap need torch and transformers: pip install 'ssrkit[train]'")
    elif not (Path(sampler).exists() and Path(first).exists()):
        missing.add(f"round {n}'s checkpoints are gone ({sampler}, {first})")
    else:
        try:
            return _measure(folder, key)
        except (OSError, ValueError, IndexError, KeyError, RuntimeError) as exc:  # the report goes on without them
            missing.add(f"round {n} not measured ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})")
    return {}


def learning_rows(run: Path, rounds: list[dict[str, Any]], measure: bool = True) -> tuple[list[dict[str, Any]], str]:
    """One row per round and role ({round, role, reward_mean, solve_rate, kl, gap, tokens}) when the run names its
    policy (else none), and a note on what could not be measured ("" when nothing is missing). `rounds`: the report's
    per-round metrics; `measure`: compute the KL and gap that learning.json does not hold yet."""
    run = Path(run)
    samplers = {m["round"]: played_by(run, m["round"]) for m in rounds}
    played = [n for n, s in samplers.items() if s]
    if not played:
        return [], ""
    first = str(samplers[min(played)])
    rows, missing = [], set()
    for m in rounds:
        measured = _round_measures(run, m["round"], samplers[m["round"]], first, measure, missing)
        for role, numbers in _role_numbers(run, m["round"], m).items():
            got = measured.get(role, {})
            rows.append({"round": m["round"], "role": role, **numbers, "kl": got.get("kl"), "gap": got.get("gap"),
                         "tokens": got.get("tokens")})
    return rows, "; ".join(sorted(missing))
