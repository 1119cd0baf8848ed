"""What a sandbox's commands run with besides the repository: the user's toolchain without their secrets
(`sanitized_env`, `is_secret_name`), and a key of it all (`environment_key`) for caches of test runs."""

from __future__ import annotations

import glob
import hashlib
import os
import re
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from .base import SandboxOptions

_SECRET = re.compile(
    r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE|CERT_PASS)", re.I
)
_SECRET_PREFIXES = ("OPENAI_", "ANTHROPIC_", "AWS_", "AZURE_", "GOOGLE_", "GCP_", "HF_", "HUGGING",
                    "GITHUB_", "GH_", "GITLAB_", "WANDB_", "SSH_", "GPG_", "DOCKER_", "KUBE", "NPM_",
                    "PYPI_", "TWINE_", "VLLM_API", "SSRKIT_API")
_KEEP = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH",
         "PYTHONHOME", "LD_LIBRARY_PATH", "JAVA_HOME", "GOPATH", "GOROOT", "CARGO_HOME", "RUSTUP_HOME")


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return bool(_SECRET.search(upper)) or upper.startswith(_SECRET_PREFIXES)


def sanitized_env(base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The user's toolchain without their secrets: PATH, locale and virtualenv survive; keys do not."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if (k in _KEEP or k.startswith("LC_")) and not is_secret_name(k)}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["PIP_NO_INPUT"] = "1"
    for k, v in (extra or {}).items():
        if is_secret_name(k):
            continue  # a secret never reaches a sandbox, even when asked for explicitly
        env[k] = v
    return env


def environment_key(options: "SandboxOptions") -> str:
    """A cheap key of what a sandbox's commands run with besides the repository: the variables it passes on
    (`sanitized_env`), its limits and setup command, and the state of each virtualenv or conda environment
    those variables name (the mtime of its site-packages changes with every install and uninstall). Two runs
    of the same tests on the same repository state agree only under the same key: the original-code run
    cached with a virtualenv active is no answer without it."""
    env = sanitized_env(extra=options.env)
    h = hashlib.sha256()
    h.update(repr((sorted(env.items()), options.limits, options.setup)).encode("utf-8", "surrogateescape"))
    prefixes = [env.get("VIRTUAL_ENV", ""), env.get("CONDA_PREFIX", "")]
    prefixes += [os.path.dirname(p) for p in env.get("PATH", "").split(":") if os.path.basename(p) == "bin"]
    for prefix in dict.fromkeys(p for p in prefixes if p and os.path.isabs(p)):
        for sp in sorted(glob.glob(os.path.join(prefix, "lib", "python*", "site-packages"))):
            try:
                h.update(f"{sp} {os.stat(sp).st_mtime_ns}\n".encode("utf-8", "surrogateescape"))
            except OSError:
                pass
    return h.hexdigest()[:16]
