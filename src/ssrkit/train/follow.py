"""`ssrkit train --follow RUN`: continuous GRPO on a run's groups as producers complete them.

Producers keep sampling; this process waits for complete groups (`train.stream`), trains one optimizer step on a
batch of whole groups, commits the step as a checkpoint with a new policy version (`store.follow`: one rename),
and refreshes the servers through `ssrkit serve --refresh` (their own strategies). Rollouts sampled more than
`max_staleness` steps before the policy being updated get no loss but stay in their group's mean (the paper drops
them from the loss); each is counted. The model and optimizer stay in memory across steps; the optimizer state is
saved with each step, so kill -9 and the same command continue the version sequence where it was.

One process (no `accelerate launch` across processes in this mode: a step's batch is whole groups, whose size
varies, which the fixed-batch plan of `loop.train` is not made for).
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from transformers import AutoTokenizer

from ssrkit.store import follow as store
from ssrkit.store.artifact import now_iso
from ssrkit.store.policy import PolicyVersion, child_version, read_version, write_version
from ssrkit.train import checkpoint as ckpt
from ssrkit.train.advantages import AdvantageOptions, compute_advantages
from ssrkit.train.batching import collate_rows
from ssrkit.train.config import ROLES, TrainConfig, write_config
from ssrkit.train.errors import TrainError
from ssrkit.train.examples import build_examples
from ssrkit.train.loop import grpo_step, load_models, make_accelerator, warmup_lr
from ssrkit.train.loss import LossOptions
from ssrkit.train.metrics import step_record
from ssrkit.train.stream import Batch, scan_run, select_batch

log = logging.getLogger("ssrkit.train")
Event = Callable[[str, int], None]


@dataclasses.dataclass
class Follower:
    """What the loop carries from step to step."""

    cfg: TrainConfig
    run: Path
    step: int
    version: PolicyVersion
    known: dict[int, str]  # step -> policy id of this lineage (a turn of another id is foreign)
    settled: set[str]
    trained_ids: set[str]
    baselines: dict[str, float]
    started: float = dataclasses.field(default_factory=time.monotonic)
    trained_here: int = 0
    stop: str = ""
    pending: Counter = dataclasses.field(default_factory=Counter)  # drops since the last step (its metrics)
    unknown_warned: bool = False


def open_follow(cfg: TrainConfig, run: Path) -> Follower:
    """Lock the run, forget what a killed step left half done, adopt the root on the first start."""
    store.clean_partials(run)
    ledger = store.reconcile(run)
    steps = store.committed_steps(run)
    state = store.read_state(run) or {}
    model = str(Path(cfg.model).resolve())
    if not steps:
        n, version = store.adopt_root(run, Path(cfg.model))
        steps = [n]
        log.info("following %s from %s (policy step %d, id %s)", run, cfg.model, n, version.id)
    elif state.get("model") and state["model"] != model:
        raise TrainError(f"{run} is followed from --model {state['model']}, not {model}: pass that model, or "
                         "follow another run directory")
    newest = steps[-1]
    version = read_version(store.step_dir(run, newest))
    known = {line["step"]: line["policy_id"] for line in ledger}
    root = read_version(store.step_dir(run, steps[0]))
    known[root.step] = root.id
    known[version.step] = version.id
    baselines = ledger[-1].get("baselines", {}) if ledger else ckpt.read_baselines(cfg.model)
    return Follower(
        cfg, run, newest, version, known,
        settled={g for line in ledger for g in line.get("groups", [])},
        trained_ids={t["id"] for line in ledger for t in line.get("trained", [])},
        baselines=dict(baselines),
        pending=Counter(store.pending_drops(ledger)),
    )



def wait_for_batch(f: Follower) -> tuple[Batch | None, float]:
    """Scan until a batch is ready (or the follower is to stop: None). Returns it and the seconds waited."""
    cfg, started, last_new = f.cfg, time.monotonic(), time.monotonic()
    first_ready: float | None = None
    while not f.stop:
        if (f.run / "STOP").exists():
            f.stop = "RUN/STOP exists"
            break
        scan = scan_run(f.run, cfg.roles or ROLES, f.settled)
        now = time.monotonic()
        if scan.groups:
            first_ready = first_ready or now
            last_new = now
        full = len(scan.groups) >= cfg.groups_per_step
        waited_enough = scan.groups and cfg.max_wait and now - first_ready >= cfg.max_wait
        if full or waited_enough:
            batch = select_batch(scan.groups, f.step, f.known, cfg.groups_per_step, cfg.max_staleness,
                                 cfg.unknown_staleness)
            return batch, now - started
        if cfg.exit_when_idle and now - last_new >= cfg.exit_when_idle:
            f.stop = f"no complete group for {cfg.exit_when_idle:g} s"
            break
        time.sleep(cfg.poll)
    return None, time.monotonic() - started


def prepare_rows(f: Follower, batch: Batch, tokenizer: Any) -> tuple[list, dict[str, Any], Counter]:
    """Advantages and rows of a batch; the ledger entries of what it trains and drops; drops by reason."""
    cfg = f.cfg
    members = [m for g in batch.groups for m in g.members if m.id not in f.trained_ids]
    masked = {i: f"masked: {batch.masked[m.id]}" for i, m in enumerate(members) if m.id in batch.masked}
    options = AdvantageOptions(cfg.std_scaling, cfg.leave_one_out, cfg.drop_zero_variance, cfg.singleton,
                               cfg.baseline_momentum, tuple(cfg.mask_statuses), tuple(cfg.drop_statuses))
    result = compute_advantages([m.rollout for m in members], options, f.baselines, masked)
    items = [(m.rollout, a) for m, a in zip(members, result.advantages) if a is not None]
    examples, _ = build_examples(items, tokenizer, cfg.max_length)
    with_rows = {e.source for e in examples}
    trained, dropped, reasons = [], [], Counter()
    for m, adv, why in zip(members, result.advantages, result.reasons):
        age, spread = batch.staleness.get(m.id, (None, 0))
        entry = {"id": m.id, "path": m.path, "group": m.rollout.group, "staleness": age}
        if adv is not None and str(m.rollout.trajectory) in with_rows:
            trained.append({**entry, "versions": sorted({v["step"] for v in m.versions if v}), "spread": spread,
                            "server_wait_s": m.server_wait_s})
            continue
        reason = _reason(why if adv is None else "no_tokens")
        dropped.append({**entry, "reason": reason, "server_wait_s": m.server_wait_s})
        reasons[reason] += 1
    for m, reason, age in batch.dropped:
        dropped.append({"id": m.id, "path": m.path, "group": m.rollout.group, "reason": reason, "staleness": age,
                        "server_wait_s": m.server_wait_s})
        reasons[reason] += 1
    f.baselines = result.baselines
    return examples, {"trained": trained, "dropped": dropped, "groups": [g.key for g in batch.groups]}, reasons


def _reason(why: str) -> str:
    """A drop reason of `store.follow.DROP_REASONS` from `compute_advantages`' words."""
    for prefix, reason in (("masked: stale", "stale"), ("masked: unknown", "unknown_version"),
                           ("zero_variance", "zero_variance"), ("singleton", "singleton"), ("dropped", "status"),
                           ("masked", "masked"), ("no_tokens", "no_tokens")):
        if why.startswith(prefix):
            return reason
    return "masked"


def optimizer_step(f: Follower, model: Any, optimizer: Any, accelerator: Any, ref_model: Any, trim: bool,
                   examples: list, pad_id: int) -> dict[str, Any]:
    """One update over every row of the batch (`loop.grpo_step`, as `loop.train`'s steps): the batch's micro-batches
    are one accumulation, so the loss is the sum of per-token losses over its trained tokens, divided by their
    number. Its size varies from step to step, so the accumulation is set for each."""
    cfg, started = f.cfg, time.perf_counter()
    size = cfg.micro_batch_size
    batches = [collate_rows(list(range(k, min(k + size, len(examples)))), examples, pad_id)
               for k in range(0, len(examples), size)]
    accelerator.gradient_accumulation_steps, accelerator.step = len(batches), 0  # the boundary: the last batch
    options = LossOptions(cfg.epsilon_low, cfg.epsilon_high, "current" if cfg.old_logprobs == "initial"
                          else cfg.old_logprobs, cfg.is_correction, cfg.is_cap, cfg.kl_coef)
    lr = warmup_lr(cfg, f.step)
    stats, grad_norm = grpo_step(model, optimizer, accelerator, ref_model, batches, options, lr, cfg.max_grad_norm,
                                 trim, use_initial=False)
    return step_record(stats, step=f.step + 1, epoch=1, lr=lr, kl_coef=cfg.kl_coef, grad_norm=grad_norm,
                       seconds=time.perf_counter() - started, device=accelerator.device)


def commit(f: Follower, accelerator: Any, model: Any, tokenizer: Any, line: dict[str, Any],
           record: dict[str, Any], on_event: Event) -> Path:
    """Write step N+1 into its partial directory, append its ledger line, and make it visible by one rename."""
    n = f.step + 1
    partial = store.begin_step(f.run, n)
    ckpt.save_hf_checkpoint(accelerator, model, tokenizer, partial, ckpt.checkpoint_dtype(f.cfg.model,
                                                                                         f.cfg.save_dtype))
    accelerator.save_state(str(partial / store.STATE_DIR))
    version = child_version(f.version, 1)
    ledger_line = {"step": n, "policy_id": version.id, "at": now_iso(), **line, "baselines": f.baselines}
    store.write_step_record(partial, {**ledger_line, "metrics": record})
    write_version(partial, version, created=ledger_line["at"])
    on_event("saved", n)
    store.append_ledger(f.run, ledger_line)
    on_event("ledger_appended", n)
    final = store.commit_step(f.run, n)
    f.step, f.version = n, version
    f.known[n] = version.id
    f.settled.update(line["groups"])
    f.trained_ids.update(t["id"] for t in line["trained"])
    on_event("committed", n)
    store.prune(f.run, f.cfg.keep_checkpoints or f.cfg.max_staleness + 2, protect=set())
    return final


def refresh_servers(cfg: TrainConfig, checkpoint: Path) -> float:
    """`ssrkit serve CHECKPOINT --refresh --pid-file F` for each server; a failure is logged, not fatal (the next
    step refreshes again). Returns the seconds spent."""
    started = time.monotonic()
    for pid_file in cfg.refresh_pid_file:
        cmd = [sys.executable, "-m", "ssrkit", "serve", str(checkpoint), "--refresh", "--json", "--pid-file", pid_file]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            log.warning("refreshing the server of %s to %s timed out", pid_file, checkpoint)
            continue
        if proc.returncode != 0:
            log.warning("refreshing the server of %s failed: %s", pid_file, proc.stderr.strip()[-300:])
    return time.monotonic() - started


def metrics_record(f: Follower, batch: Batch, line: dict[str, Any], reasons: Counter, record: dict[str, Any],
                   times: dict[str, float]) -> dict[str, Any]:
    """One line of steps.jsonl: what the step trained, how stale it was, what it dropped, who waited."""
    hist = Counter("unknown" if t["staleness"] is None else str(t["staleness"]) for t in line["trained"])
    f.trained_here += len(line["trained"])
    hours = (time.monotonic() - f.started) / 3600
    return {
        **record, "step": f.step + 1, "at": now_iso(), "elapsed_s": round(time.monotonic() - f.started, 3),
        "groups": len(batch.groups), "rollouts": len(line["trained"]),
        "staleness": dict(sorted(hist.items())),
        "staleness_spread_max": max((t["spread"] for t in line["trained"]), default=0),
        "mixed_version_rollouts": sum(1 for t in line["trained"] if len(t["versions"]) > 1),
        "dropped": {r: reasons.get(r, 0) for r in store.DROP_REASONS},
        "producer_wait_s": round(sum(e["server_wait_s"] for e in line["trained"] + line["dropped"]), 3),
        "rollouts_per_hour": round(f.trained_here / hours, 1) if hours > 0 else 0.0,
        **{k: round(v, 3) for k, v in times.items()},
    }


def follow(cfg: TrainConfig, run: Path, on_event: Event | None = None) -> dict[str, Any]:
    """Train on `run` until stopped (SIGTERM/SIGINT at a step boundary, RUN/STOP, --max-steps, --exit-when-idle).
    `on_event(name, step)` runs at "saved", "ledger_appended", "committed" and "refreshed" (tests stop there)."""
    on_event = on_event or (lambda name, step: None)
    run = Path(run).resolve()
    if not run.is_dir():
        raise TrainError(f"no such run directory: {run} (the RUN of `make -f recipes/selfplay.mk`, or of your own "
                         "producers; create it to start training before the first round)")
    lock = store.lock(run)
    try:
        f = open_follow(cfg, run)
        step_cfg = dataclasses.replace(cfg, model=str(store.step_dir(run, f.step)), grad_accum=1)
        write_config(cfg, store.follow_dir(run) / ckpt.CONFIG_FILE)
        return _loop(f, step_cfg, on_event)
    finally:
        lock.close()


def _loop(f: Follower, step_cfg: TrainConfig, on_event: Event) -> dict[str, Any]:
    accelerator = make_accelerator(step_cfg)
    if accelerator.num_processes > 1:
        raise TrainError("--follow trains in one process (a batch is whole groups, of varying size): run it with "
                         "python -m ssrkit.train, not accelerate launch across processes")
    tokenizer = AutoTokenizer.from_pretrained(step_cfg.model, trust_remote_code=step_cfg.trust_remote_code)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    model, ref_model, optimizer, trim = load_models(step_cfg, accelerator, accelerator.device.type == "cuda")
    state = store.step_dir(f.run, f.step) / store.STATE_DIR
    if state.is_dir():
        accelerator.load_state(str(state))
    previous = {s: signal.signal(s, lambda *_: setattr(f, "stop", "stopped by a signal at a step boundary"))
                for s in (signal.SIGTERM, signal.SIGINT)}
    _write_state(f, "following")
    if f.step > min(f.known) and f.cfg.refresh_pid_file:
        refresh_servers(f.cfg, store.step_dir(f.run, f.step))  # a kill after a commit, before its refresh
    try:
        while not f.stop and not (f.cfg.max_steps and f.step >= f.cfg.max_steps):
            _write_state(f, "waiting")
            batch, wait_s = wait_for_batch(f)
            if batch is None:
                break
            _one_step(f, batch, wait_s, (model, optimizer, accelerator, ref_model, trim, tokenizer, pad_id), on_event)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    _write_state(f, "stopped")
    return {"run": str(f.run), "step": f.step, "policy_id": f.version.id, "trained": len(f.trained_ids),
            "stopped": f.stop or f"--max-steps {f.cfg.max_steps} reached"}


def _one_step(f: Follower, batch: Batch, wait_s: float, parts: tuple, on_event: Event) -> None:
    model, optimizer, accelerator, ref_model, trim, tokenizer, pad_id = parts
    examples, line, reasons = prepare_rows(f, batch, tokenizer)
    if not examples:  # nothing to train: a drop-only ledger line under the current step settles the groups
        store.append_ledger(f.run, {"step": f.step, "policy_id": f.version.id, "at": now_iso(), **line,
                                    "trained": [], "baselines": f.baselines})
        f.settled.update(line["groups"])
        f.pending.update(reasons)
        said = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
        log.info("%d complete group(s) settled without a step: %s", len(line["groups"]),
                 f"{len(line['dropped'])} rollouts dropped ({said})" if line["dropped"]
                 else "they hold no rewarded trajectory (e.g. injections that ended without submitting a bug)")
        return
    reasons, f.pending = reasons + f.pending, Counter()
    unknown = sum(1 for t in line["trained"] if t["staleness"] is None)
    if unknown and not f.unknown_warned:
        f.unknown_warned = True
        log.warning("%d rollouts were sampled by a server that did not report its policy (not started by "
                    "`ssrkit serve`, the nccl strategy, or trajectories from before versions): their staleness is "
                    "unknown and not bounded; --unknown-staleness drop leaves them out", unknown)
    record = optimizer_step(f, model, optimizer, accelerator, ref_model, trim, examples, pad_id)
    saved = time.monotonic()
    final_metrics = metrics_record(f, batch, line, reasons, record, {"wait_s": wait_s, "step_s": record["seconds"]})
    final = commit(f, accelerator, model, tokenizer, line, final_metrics, on_event)
    save_s = time.monotonic() - saved
    refresh_s = refresh_servers(f.cfg, final)
    on_event("refreshed", f.step)
    store.append_steps_log(f.run, {**final_metrics, "save_s": round(save_s, 3), "refresh_s": round(refresh_s, 3)})
    _write_state(f, "following")
    log.info("step %d (policy %s): %d rollouts trained, %d dropped (%s), waited %.1f s for data",
             f.step, f.version.id, len(line["trained"]), len(line["dropped"]),
             ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none", wait_s)


def _write_state(f: Follower, status: str) -> None:
    import os

    store.write_state(f.run, {"run": str(f.run), "model": str(Path(f.cfg.model).resolve()),
                              "lineage": f.version.lineage, "step": f.step, "policy_id": f.version.id,
                              "status": status, "pid": os.getpid(), "updated": now_iso(),
                              "trained": len(f.trained_ids), "stop": f.stop})
