#!/usr/bin/env python3
"""Small glue for recipes/selfplay.mk (standard library only; any Python 3.11+ runs it).

    selfplay_helper.py config OUT [--base FILE] [--set SECTION.KEY=VALUE ...]
        Write the run's resolved configuration (TOML) to OUT: the user's FILE, if any, overlaid with the
        recipe's settings. OUT is rewritten only when its content changes, atomically.
    selfplay_helper.py dirs DIR...
        Print the DIRs that hold at least one artifact (a stage with nothing to do is skipped).
    selfplay_helper.py policy RUN ROUND INITIAL
        The checkpoint round ROUND uses: the newest finished `RUN/round-K/policy` of an earlier round, else
        INITIAL.
    selfplay_helper.py server ensure|stop --run RUN [--checkpoint DIR --port P --name NAME --ssrkit CMD ...]
        Keep one `ssrkit serve --detach` server for the run, serving DIR: when DIR changes it is restarted, or
        with --strategy nccl moved in place (`ssrkit serve DIR --refresh`).
    selfplay_helper.py status RUN ROUNDS REPO...
        Which steps of which rounds are done.
    selfplay_helper.py continuous --run RUN --make 'make -f selfplay.mk' --train-launch CMD --policy DIR ...
        Continuous self-play: start `ssrkit train --follow RUN` in the background (log RUN/follow/train.log,
        pid RUN/follow/trainer.pid), serve its first step (--serve 'server ensure flags'), then run rounds with
        CONTINUOUS=yes, CHUNK at a time, until RUN/STOP exists (`continuous-stop`, or DURATION passed) or
        MAX_ROUNDS; then stop the trainer at a step boundary (SIGTERM), the server, and report.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Any

MARKERS = ("artifact.toml", "bug_inject.diff", "bug_patch.diff")


# -- config ------------------------------------------------------------------------------------------

def parse_value(text: str) -> Any:
    """`8` → 8, `0.5` → 0.5, `true` → True, `["a", "b"]` → list (JSON); anything else stays a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    if text.strip().startswith(("[", "{")):
        try:
            return json.loads(text)
        except ValueError:
            pass
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else json.dumps(k)


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_scalar(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(data: dict[str, Any]) -> str:
    """TOML for what ssrkit.toml holds: top-level tables of scalars, lists and (inline) tables."""
    top = [f"{_key(k)} = {_scalar(v)}\n" for k, v in data.items() if not isinstance(v, dict) and v is not None]
    out = "".join(top)
    for k, v in data.items():
        if isinstance(v, dict):
            body = "".join(f"{_key(x)} = {_scalar(y)}\n" for x, y in v.items() if y is not None)
            out += ("\n" if out else "") + f"[{_key(k)}]\n" + body
    return out


def write_if_changed(path: Path, text: str) -> bool:
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return True


def cmd_config(args: argparse.Namespace) -> int:
    data: dict[str, Any] = {}
    if args.base:
        try:
            data = tomllib.loads(Path(args.base).read_text(encoding="utf-8"))
        except FileNotFoundError:
            print(f"error: CONFIG={args.base}: no such file", file=sys.stderr)
            return 2
        except tomllib.TOMLDecodeError as e:
            print(f"error: CONFIG={args.base}: not valid TOML: {e}", file=sys.stderr)
            return 2
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or "." not in key:
            print(f"error: --set {item!r}: expected SECTION.KEY=VALUE", file=sys.stderr)
            return 2
        if value == "":
            continue  # a recipe variable left empty: ssrkit's default (or the repository's profile) applies
        section, name = key.split(".", 1)
        data.setdefault(section, {})[name] = parse_value(value)
    header = ("# The resolved configuration of this self-play run, written by recipes/selfplay.mk.\n"
              "# [run] records the recipe's variables; the other sections are passed to every ssrkit command\n"
              "# (--config), over each repository's own ssrkit.toml. Each round keeps the copy it started with.\n\n")
    changed = write_if_changed(Path(args.out), header + to_toml(data))
    if changed:
        print(f"wrote {args.out}")
    return 0


# -- artifacts ---------------------------------------------------------------------------------------

def holds_artifacts(d: Path) -> bool:
    if not d.is_dir():
        return False
    for root, dirs, files in os.walk(d):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("attempts", "logs")]
        if any(m in files for m in MARKERS):
            return True
    return False


def cmd_dirs(args: argparse.Namespace) -> int:
    for d in args.dirs:
        if holds_artifacts(Path(d)):
            print(f"{args.as_option} {d}" if args.as_option else d)
    return 0


# -- policies ----------------------------------------------------------------------------------------

def finished_checkpoint(d: Path) -> bool:
    try:
        state = json.loads((d / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    # a full checkpoint (config.json), or a LoRA adapter (adapter_config.json) with SERVE_STRATEGY=lora
    return bool(state.get("done")) and ((d / "config.json").is_file() or (d / "adapter_config.json").is_file())


def policy_for(run: Path, round_no: int, initial: str) -> str:
    for k in range(round_no - 1, 0, -1):
        d = run / f"round-{k:03d}" / "policy"
        if finished_checkpoint(d):
            return str(d.resolve())
    return initial


def cmd_policy(args: argparse.Namespace) -> int:
    print(policy_for(Path(args.run), int(args.round), args.initial))
    return 0


# -- the model server --------------------------------------------------------------------------------

def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=3) as r:
            return r.status == 200
    except OSError:
        return False


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def cmd_server(args: argparse.Namespace) -> int:
    d = Path(args.run) / "serve"
    d.mkdir(parents=True, exist_ok=True)
    state_file, pid_file = d / "server.json", d / "vllm.pid"
    ssrkit = shlex.split(args.ssrkit)
    with open(d / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # parallel steps (make -j) share one server
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            state = {}
        running = bool(state) and _alive(int(state.get("pgid", 0) or 0))
        if args.action == "stop":
            if running:
                subprocess.run([*ssrkit, "serve", "--stop", "--pid-file", str(pid_file)], check=False)
            state_file.unlink(missing_ok=True)
            return 0
        want = {"checkpoint": str(args.checkpoint), "port": args.port, "name": args.name,
                "command": args.command, "args": args.vllm_args, "env": args.env, "strategy": args.strategy}
        if running and all(state.get(k) == v for k, v in want.items()) and _healthy(args.port):
            return 0
        same_server = running and all(state.get(k) == v for k, v in want.items() if k != "checkpoint")
        if same_server and args.strategy != "restart" and _healthy(args.port):
            # nccl: push the new checkpoint's weights into the running server (no restart)
            print(f"selfplay: refreshing the server to {args.checkpoint} ({args.strategy})", flush=True)
            proc = subprocess.run([*ssrkit, "serve", str(args.checkpoint), "--refresh", "--json", "--pid-file",
                                   str(pid_file)], stdout=subprocess.PIPE, text=True)
            if proc.returncode != 0:
                return proc.returncode
            state_file.write_text(json.dumps({**want, "pgid": state["pgid"], "model": _served(proc.stdout)}) + "\n")
            return 0
        if running:
            print(f"selfplay: stopping the server of {state.get('checkpoint')}", flush=True)
            subprocess.run([*ssrkit, "serve", "--stop", "--pid-file", str(pid_file)], check=False)
        print(f"selfplay: serving {args.checkpoint} as {args.name} on port {args.port} (log: {d / 'vllm.log'})",
              flush=True)
        cmd = [*ssrkit, "serve", str(args.checkpoint), "--detach", "--port", str(args.port),
               "--served-model-name", args.name, "--pid-file", str(pid_file), "--log", str(d / "vllm.log"),
               "--command", args.command, "--timeout", str(args.timeout), "--strategy", args.strategy, "--json"]
        if args.vllm_args:
            cmd += ["--vllm-args", args.vllm_args]
        if args.lora_keep > 1:
            cmd += ["--lora-keep", str(args.lora_keep)]
        for pair in shlex.split(args.env):
            cmd += ["--env", pair]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
        if proc.returncode != 0:
            state_file.unlink(missing_ok=True)
            return proc.returncode
        pgid = int(pid_file.read_text().split()[0])
        state_file.write_text(json.dumps({**want, "pgid": pgid, "model": _served(proc.stdout)}) + "\n")
    return 0


def _served(stdout: str) -> str | None:
    """The model name in `ssrkit serve --json`'s last line (a LoRA refresh names each adapter anew)."""
    print(stdout, end="", flush=True)
    try:
        return json.loads(stdout.strip().splitlines()[-1])["model"]
    except (ValueError, IndexError, KeyError, TypeError):
        return None


def cmd_model(args: argparse.Namespace) -> int:
    """The model name agents send: the recipe's server's current one (an adapter's under lora), else --default."""
    try:
        state = json.loads((Path(args.run) / "serve" / "server.json").read_text())
    except (OSError, ValueError):
        state = {}
    print(state.get("model") or args.default)
    return 0


# -- status ------------------------------------------------------------------------------------------

def cmd_status(args: argparse.Namespace) -> int:
    run = Path(args.run)
    steps = ["start", *(f"{s}-{r}" for s in ("inject", "validate") for r in args.repos), "select",
             *(f"{s}-{r}" for s in ("solve", "reward", "higher") for r in args.repos), "close", "train", "end"]
    print(f"{run}: {'exists' if run.is_dir() else 'not started'}")
    for k in range(1, int(args.rounds) + 1):
        done = run / f"round-{k:03d}" / ".done"
        have = [s for s in steps if (done / s).is_file()]
        if "end" in have:
            state = "done"
        elif have:
            state = "in progress; done: " + ", ".join(have)
        else:
            state = "not started"
        print(f"  round {k:03d}: {state}")
    return 0


def _start_trainer(args: argparse.Namespace, run: Path) -> subprocess.Popen:
    """`TRAIN_LAUNCH --follow RUN` in the background; returns once its first step (the root) is committed."""
    follow = run / "follow"
    follow.mkdir(parents=True, exist_ok=True)
    cmd = [*shlex.split(args.train_launch), "--follow", str(run), "--model", args.policy,
           *(["--refresh-pid-file", str(run / "serve" / "vllm.pid")] if args.serve else []),
           *shlex.split(args.follow_args)]
    print(f"selfplay: training continuously: {shlex.join(cmd)} (log: {follow / 'train.log'})", flush=True)
    with open(follow / "train.log", "ab") as log:
        trainer = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    (follow / "trainer.pid").write_text(f"{trainer.pid}\n")
    while not list(follow.glob("checkpoints/step-*/policy.json")):
        if trainer.poll() is not None:
            tail = (follow / "train.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise SystemExit("error: the trainer exited before its first step:\n  " + "\n  ".join(tail))
        time.sleep(1)
    return trainer


def _stop_trainer(trainer: subprocess.Popen) -> None:
    """SIGTERM: the trainer ends at its next step boundary; a step can take long, so wait, then kill (safe: a
    step commits by one rename)."""
    if trainer.poll() is None:
        trainer.send_signal(signal.SIGTERM)
        try:
            trainer.wait(timeout=600)
        except subprocess.TimeoutExpired:
            trainer.kill()
            trainer.wait()


def refresh_warning(serve: str, follow_args: str) -> str | None:
    """What to say when nothing moves the producers' server to the trainer's new steps (None: something does:
    the recipe's own server, or servers named to the trainer with --refresh-pid-file)."""
    if serve or any(a.startswith("--refresh-pid-file") for a in shlex.split(follow_args)):
        return None
    return ("nothing refreshes the server at BASE_URL: producers keep sampling the policy it serves, and staleness "
            "grows with every step (SERVE=yes, or FOLLOW_ARGS=\"--refresh-pid-file F\" for a server started with "
            "`ssrkit serve --detach`)")


def cmd_continuous(args: argparse.Namespace) -> int:
    if args.mode != "model":
        print("error: continuous self-play trains the model: MODE=model (with POLICY, and SERVE=yes or BASE_URL)",
              file=sys.stderr)
        return 2
    run = Path(args.run)
    run.mkdir(parents=True, exist_ok=True)
    (run / "STOP").unlink(missing_ok=True)
    warning = refresh_warning(args.serve, args.follow_args)
    if warning:
        print(f"selfplay: warning: {warning}", file=sys.stderr)
    trainer = _start_trainer(args, run)
    deadline = time.monotonic() + args.duration if args.duration else None
    code = 0
    try:
        if args.serve:
            root = sorted(run.glob("follow/checkpoints/step-*/policy.json"))[-1].parent
            code = main(["server", "ensure", "--run", str(run), "--checkpoint", str(root), "--ssrkit", args.ssrkit,
                         *shlex.split(args.serve)])
        done = len(list(run.glob("round-*/.done/end")))
        while code == 0 and not (run / "STOP").exists():
            upto = done + args.chunk if not args.max_rounds else min(done + args.chunk, args.max_rounds)
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), (run / "STOP").touch) if deadline else None
            if timer:
                timer.start()
            proc = subprocess.run([*shlex.split(args.make), "CONTINUOUS=yes", f"ROUNDS={upto}", "rounds"])
            if timer:
                timer.cancel()
            if proc.returncode != 0 and not (run / "STOP").exists():
                print(f"error: a round failed (make exited {proc.returncode}); see {run}/round-*/logs",
                      file=sys.stderr)
                code = proc.returncode
            done = upto
            if args.max_rounds and done >= args.max_rounds:
                break
    finally:
        _stop_trainer(trainer)
        if args.serve:
            main(["server", "stop", "--run", str(run), "--ssrkit", args.ssrkit])
    if code == 0:
        subprocess.run([*shlex.split(args.ssrkit), "report", str(run), "--no-plots"])
    return code


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="selfplay_helper.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("config")
    c.add_argument("out")
    c.add_argument("--base", default="")
    c.add_argument("--set", action="append", default=[])
    c.set_defaults(fn=cmd_config)
    d = sub.add_parser("dirs")
    d.add_argument("dirs", nargs="*")
    d.add_argument("--as-option", default="", help="print each as `OPTION DIR` (e.g. --known)")
    d.set_defaults(fn=cmd_dirs)
    q = sub.add_parser("policy")
    q.add_argument("run")
    q.add_argument("round")
    q.add_argument("initial")
    q.set_defaults(fn=cmd_policy)
    s = sub.add_parser("server")
    s.add_argument("action", choices=["ensure", "stop"])
    s.add_argument("--run", required=True)
    s.add_argument("--checkpoint", default="")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--name", default="policy")
    s.add_argument("--command", default="vllm serve")
    s.add_argument("--vllm-args", default="")
    s.add_argument("--env", default="", help="KEY=VALUE ... for the server's environment")
    s.add_argument("--timeout", type=float, default=900.0)
    s.add_argument("--ssrkit", default="ssrkit")
    # lora names each adapter anew (policy-1, policy-2, ...): the steps ask `model` for the current name
    s.add_argument("--strategy", default="restart", choices=["restart", "lora", "nccl"])
    s.add_argument("--lora-keep", type=int, default=1)
    s.set_defaults(fn=cmd_server)
    k = sub.add_parser("continuous")
    k.add_argument("--run", required=True)
    k.add_argument("--mode", default="model")
    k.add_argument("--make", required=True)
    k.add_argument("--chunk", type=int, default=2)
    k.add_argument("--duration", type=float, default=0.0)
    k.add_argument("--max-rounds", type=int, default=0)
    k.add_argument("--train-launch", required=True)
    k.add_argument("--policy", required=True)
    k.add_argument("--follow-args", default="")
    k.add_argument("--ssrkit", default="ssrkit")
    k.add_argument("--serve", default="", help="`server ensure` flags; empty: no server (BASE_URL's)")
    k.set_defaults(fn=cmd_continuous)
    m = sub.add_parser("model")
    m.add_argument("--run", required=True)
    m.add_argument("--default", default="")
    m.set_defaults(fn=cmd_model)
    t = sub.add_parser("status")
    t.add_argument("run")
    t.add_argument("rounds")
    t.add_argument("repos", nargs="*")
    t.set_defaults(fn=cmd_status)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
