"""The grader an exported task carries: `grade.py` (templates/export_grader.py completed with the artifact's
grading data and export's constants) beside `verdict.zip`, ssrkit's `verdict` package whole."""

from __future__ import annotations

import base64
import functools
import io
import json
import zipfile
from importlib import resources
from typing import Any

from ...sandbox import Limits

#: an exported task asks its harness for the limits ssrkit's own sandboxes have
_LIMITS = Limits()

#: where eval.sh's grader keeps its state unless SSRKIT_GRADE_STATE names another place (tests running
#: exported graders side by side on one host give each its own)
GRADER_STATE = "/tmp/ssrkit-grade"
#: set by the task image (`dockerfile`): the grader may kill every process but its own lineage there, which
#: it never does elsewhere (an agent cannot change the environment of the verifier's command)
TASK_CONTAINER_ENV = "SSRKIT_TASK_CONTAINER"
#: what every git command of an exported task's grading runs with: no hook, no fsmonitor — in Harbor the agent
#: was root in the same container and may have configured both (its configuration files are not read either:
#: GIT_CONFIG_GLOBAL=/dev/null, GIT_CONFIG_NOSYSTEM=1)
GIT_SAFETY = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.quotepath=false")
#: the files Harbor reads the reward from, reward.json first (Harbor's names: not the artifact's REWARD)
REWARD_FILES = tuple(f"reward.{ext}" for ext in ("json", "txt"))
#: ssrkit's verdict package, beside an exported task's grade.py, and the name it is imported by there
VERDICT_ZIP = "verdict.zip"
VERDICT_PACKAGE = "ssrkit_verdict"


@functools.cache
def verdict_zip() -> bytes:
    """`ssrkit.verdict`, whole, as the zip an exported grader imports it from (package `ssrkit_verdict`; its
    imports are relative, so it needs no other name). Deterministic: sorted names, fixed times and modes, so
    the same ssrkit exports the same bytes."""
    package = resources.files("ssrkit.verdict")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(p.name for p in package.iterdir() if p.name.endswith(".py")):
            info = zipfile.ZipInfo(f"{VERDICT_PACKAGE}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, package.joinpath(name).read_bytes())
    return buf.getvalue()


def grader_script(data: dict[str, Any]) -> str:
    """`grade.py`: a standard-library script that grades in the task's container, importing ssrkit's verdict from
    VERDICT_ZIP beside it (see templates/export_grader.py)."""
    template = resources.files("ssrkit.templates").joinpath("export_grader.py").read_text(encoding="utf-8")
    constants = "\n".join([
        f"VERDICT_ZIP = {VERDICT_ZIP!r}",
        f"TASK_CONTAINER_ENV = {TASK_CONTAINER_ENV!r}",
        f"OUTPUT_BYTES = {_LIMITS.output_bytes!r}",
        f"GIT_SAFETY = {GIT_SAFETY!r}",
        f"REWARD_FILES = {REWARD_FILES!r}",
    ])
    payload = base64.b64encode(json.dumps(data, sort_keys=True).encode("utf-8")).decode("ascii")
    return (f"#!/usr/bin/env python3\nfrom __future__ import annotations\n\n"
            f"# -- from ssrkit.runs.export {'-' * 80}\n{constants}\n\n{template}\n\n"
            f"DATA = json.loads(base64.b64decode({payload!r}).decode('utf-8'))\n\n"
            f"if __name__ == '__main__':\n    sys.exit(main(DATA, sys.argv[1:]))\n")


def _b64_heredoc(dest: str, data: bytes, tag: str) -> list[str]:
    text = base64.encodebytes(data).decode("ascii").rstrip("\n")
    return [f"base64 -d > {dest} <<'{tag}'", *text.splitlines(), tag]
