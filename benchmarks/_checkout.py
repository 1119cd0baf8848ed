"""Which ssrkit checkout a benchmark measures: this one, or the one named by --src (read before the imports)."""

from __future__ import annotations

import sys
from pathlib import Path


def use_checkout() -> Path:
    """Put the src/ of the checkout named by `--src DIR` (default: this one) first on sys.path; return it.

    With a worktree of a base commit (`git worktree add /tmp/base main`) the same benchmark measures the code
    before a change, on the same machine at the same time.
    """
    root = Path(__file__).resolve().parents[1]
    for i, a in enumerate(sys.argv):
        if a == "--src" and i + 1 < len(sys.argv):
            root = Path(sys.argv[i + 1]).resolve()
        elif a.startswith("--src="):
            root = Path(a.split("=", 1)[1]).resolve()
    sys.path.insert(0, str(root / "src"))
    return root
