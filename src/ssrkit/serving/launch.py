"""The command that starts vLLM on a checkpoint: the launcher (the `vllm` script, or vLLM's module entry point
where the script is broken), the flags that make its log-probs the trainer's, and the checkpoint's policy version."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..store.hf_checkpoint import declared_dtype
from ..store.policy import PolicyError, PolicyVersion, read_version


#: vLLM's OpenAI-compatible server as a module (`python -m ...`): what runs where the `vllm` script does not
MODULE_ENTRY = "vllm.entrypoints.openai.api_server"
_WORKING_SCRIPTS: dict[str, bool] = {}


def resolve_launcher(command: list[str]) -> list[str]:
    """The server command to run: `command` itself, except that `vllm serve` whose `vllm` script is broken (it
    cannot even print its version) becomes `PYTHON -m vllm.entrypoints.openai.api_server` with the Python the
    script was installed for."""
    if len(command) != 2 or Path(command[0]).name != "vllm" or command[1] != "serve":
        return list(command)
    script = shutil.which(command[0])
    if script is None:
        return list(command)  # start() says it is missing
    if script not in _WORKING_SCRIPTS:
        try:
            probe = subprocess.run([script, "--version"], capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
            _WORKING_SCRIPTS[script] = probe.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _WORKING_SCRIPTS[script] = False
    if _WORKING_SCRIPTS[script]:
        return list(command)
    return [_script_python(Path(script)), "-m", MODULE_ENTRY]


def _script_python(script: Path) -> str:
    """The interpreter of a console script (its `#!` line), else the one next to it, else ours."""
    try:
        first = script.read_bytes()[:256].split(b"\n", 1)[0].decode()
    except (OSError, UnicodeDecodeError):
        first = ""
    if first.startswith("#!") and Path(first[2:].strip().split()[0]).is_file():
        return first[2:].strip().split()[0]
    sibling = script.with_name("python")
    return str(sibling) if sibling.is_file() else sys.executable


def faithful_logprob_args(checkpoint: str | Path, user_args: list[str]) -> list[str]:
    """Flags that make the server's log-probs the trainer's, for those `user_args` do not set already."""
    given = {a.split("=", 1)[0] for a in user_args}
    out = []
    if "--logprobs-mode" not in given:
        out += ["--logprobs-mode", "processed_logprobs"]
    dtype = declared_dtype(checkpoint)
    if "--dtype" not in given and dtype:
        out += ["--dtype", dtype]
    return out


def policy_of(checkpoint: str | Path) -> PolicyVersion | None:
    """The checkpoint's policy version, None when it has none (or an unreadable one: served, not versioned)."""
    try:
        return read_version(checkpoint)
    except PolicyError:
        return None
