"""Helpers of the self-play tests (a uniquely named module: `from conftest import` would clash).

The recipe runs exactly as a user runs it (`make -f recipes/selfplay.mk ...`), with the ssrkit of this
checkout (`python -m ssrkit`, src/ on PYTHONPATH) and this interpreter's directory first on PATH, so the
sandboxed test runs use the same Python (with pytest and coverage).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fixtures.calc import CALC, TEST_CALC
from fixtures.repos import git

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


#: a per-repository profile, as a user would write one: these tests need no pytest plugins; one test is
#: declared unreliable (the procedural injector never selects it, the LLM injector is told not to run it)
PROFILE = '''\
[sandbox]
env = { PYTEST_DISABLE_PLUGIN_AUTOLOAD = "1" }

[inject]
exclude_tests = ["tests/test_calc.py::test_mean_empty"]
'''


def make_calc_repo(repo: Path) -> Path:
    """A git repository with a calculator module and seven passing pytest tests, in two commits."""
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(CALC.replace("    if x > hi:\n        return hi\n", ""))
    (repo / "tests" / "test_calc.py").write_text(TEST_CALC.replace(
        "def test_clamp_high():\n    assert clamp(50, 0, 10) == 10\n\n\n", ""))
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    (repo / "ssrkit.toml").write_text(PROFILE)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Calculator with add, sub, clamp and mean")
    (repo / "calc.py").write_text(CALC)
    (repo / "tests" / "test_calc.py").write_text(TEST_CALC)
    git(repo, "commit", "-q", "-am", "Fix clamp: respect the upper bound")
    return repo


def recipe_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    env.pop("MAKEFLAGS", None)
    env.pop("MFLAGS", None)
    return env


def recipe_cmd(run: Path, repos: list[Path], *args: str, target: str = "all") -> list[str]:
    """`make -f recipes/selfplay.mk TARGET RUN=... REPOS=... ARGS`, with this checkout's ssrkit."""
    return ["make", "-s", "-f", str(ROOT / "recipes" / "selfplay.mk"), target, f"RUN={run}",
            "REPOS=" + " ".join(str(r) for r in repos), f"SSRKIT={sys.executable} -m ssrkit",
            f"PYTHON={sys.executable}", *args]


def run_recipe(run: Path, repos: list[Path], *args: str, target: str = "all",
               timeout: float = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(recipe_cmd(run, repos, *args, target=target), cwd=ROOT, env=recipe_env(),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"recipe failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


#: the offline round the session shares (tests that only read it use this fixture)
OFFLINE_ARGS = ("ROUNDS=1", "N=2", "ATTEMPTS=2", "JOBS=2", "BUDGET_RUNS=4")


