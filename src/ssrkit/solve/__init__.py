"""Solving (SPEC §6), split by job:

- `sandbox`: the solver's sandbox (original + bug + weaken, history replaced by one fresh commit) and the fix
  taken from it (`solver_diff`, the only place a fix is computed);
- `engine`: N independent attempts per artifact, each graded in a fresh sandbox (`Engine`, `SolveOptions`);
- `solvers`: what makes an attempt (oracle, null, LLM agent, the repair baseline) and their registry;
- `repair`: the procedural repair baseline (mutation operators guided by per-test coverage);
- `grade`: one fix graded against the artifact's expectations, the canary and protected files included;
- `higher_order`: new artifacts from failed attempts;
- `run`: a batch of solving as `ssrkit solve` asks it (`SolveBatch`).

A higher-order artifact needs nothing extra to be solved: its `bug_inject.diff` *is* the combined code diff of
its parent's bug and the failed fix stacked on it, so the same recipe yields the stacked state.
"""

from .engine import EXTERNAL, Engine, SolveOptions, attempt_unit, solvable
from .sandbox import JUNK, prepare_solver_sandbox, solver_diff, task_diff

__all__ = ["EXTERNAL", "JUNK", "Engine", "SolveOptions", "attempt_unit", "prepare_solver_sandbox", "solvable",
           "solver_diff", "task_diff"]
