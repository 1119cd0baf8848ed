"""Throwaway git repositories and artifact copies for tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GIT_ID = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *GIT_ID, "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def copy_artifact(src: Path, dest: Path) -> Path:
    """A copy of an artifact's definition (without earlier verdicts), so tests never write into examples/."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("validation.json", "logs", "attempts", "reward.json"))
    return dest
