"""Higher-order bugs (SPEC §8): a failed solver attempt is a natural, realistic mistake — stack it on the bug.

For each failed attempt of an artifact, the new buggy state is original + bug + weaken + the failed fix with
its test-file hunks dropped (every file `grade` would restore: listed, test-like and protected files). The
new artifact records that state without any extra file: its `bug_inject.diff` **is** the combined code diff
against the original repository (computed in a sandbox: apply the parent's bug and the code part of the
fix, diff), so the solver sandbox, the oracle (its reverse) and grading need no special case.
`test_weaken.diff`, `test_script.sh`, `test_files.txt` and `test_parser.py` are inherited; `artifact.toml`
says `order = parent + 1` (never above 2), `parent` (the parent's id), `parent_attempt` and
`strategy = "higher_order"`.

Skipped, with a reason: attempts that passed, unfinished attempts, fixes with no code change, fixes that do
not apply, fixes whose code part undoes the whole bug, and duplicates (the same combined diff gives the same
content id, so an artifact already in the output directory, or made earlier in the same run, is not made
again; nor is one already among the `known` artifacts: a task carried into a later round fails the same way
again, and its earlier round made that artifact already). The new artifacts are validated like any other (the CLI does it; `higher_order` only writes them).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import patch as patches
from ..store.artifact import (BUG_DIFF, FIX, METADATA, OUTPUT_DIRS, TEST_FILES, TEST_PARSER, TEST_SCRIPT, WEAKEN_DIFF,
                             Artifact, Metadata, content_id, create_artifact)
from ..errors import PatchError, SsrkitError
from ..executor import ArtifactRef, SourceRef, relabel
from ..store.fsutil import own_dir
from .grade import GradeSettings
from ..verdict.patterns import matches
from ..sandbox import PRISTINE, Sandbox, SandboxOptions
from ..store.attempts import any_complete, completed_attempts, read_eval, read_fix
from ..store.source import RepoSource
from ..executor.units import path_mapping, scratch_for

if TYPE_CHECKING:
    from ..executor import Executor
    from ..validate import Validator

MAX_ORDER = 2
STRATEGY = "higher_order"
NO_CODE_CHANGE = "the fix changes no code file"  # why a failed attempt gives no higher-order artifact


@dataclass
class Outcome:
    """What became of one attempt."""

    parent: str  # the parent artifact's path
    attempt: str
    status: str  # created | duplicate | skipped
    reason: str
    path: str | None = None  # the new artifact (created or duplicate)
    id: str | None = None
    valid: bool | None = None  # after validation (None: not validated)
    invalid_because: str | None = None  # the first failed check, "name: message"

    def to_dict(self) -> dict[str, Any]:
        out = {"parent": self.parent, "attempt": self.attempt, "status": self.status, "reason": self.reason,
               "path": self.path, "id": self.id}
        if self.valid is not None:
            out["valid"] = self.valid
        if self.invalid_because:
            out["invalid_because"] = self.invalid_because
        return out


def code_part(fix_diff: str, artifact: Artifact, settings: GradeSettings) -> str:
    """The fix without the files grading would restore (listed tests, test-like and protected files)."""
    if not fix_diff.strip():
        return ""
    listed = set(artifact.test_files)
    keep = []
    per_file = patches.split_by_file(fix_diff, FIX)
    changes = {c.path: c for c in patches.parse(fix_diff, FIX)}
    for path, sub in per_file.items():
        c = changes[path]
        sides = [p for p in (c.source, c.target) if p]
        if c.binary or any(p in listed or matches(p, settings.patterns) for p in sides):
            continue
        keep.append(sub)
    return "".join(keep)


def combined_bug_diff(sandbox: Sandbox, artifact: Artifact, fix_code: str, settings: GradeSettings) -> str:
    """original → original + bug + code part of the fix, as one diff over code files only."""
    sandbox.reset(PRISTINE)
    sandbox.fresh_history(message="original")  # HEAD = the original tree as the sandbox holds it
    sandbox.apply_patch(artifact.bug_diff, label=BUG_DIFF)
    sandbox.apply_patch(fix_code, label=FIX)
    diff = sandbox.diff()
    return code_part(diff, artifact, settings)


def _normalized(diff: str) -> str:
    return "".join(line for line in diff.splitlines(keepends=True) if not line.startswith("index "))


def make_higher_order(
    artifact: Artifact,
    source: RepoSource,
    out_dir: Path,
    open_sandbox: Callable[[RepoSource], Sandbox],
    *,
    settings: GradeSettings | None = None,
    seen: set[str] | None = None,
    max_new: int | None = None,
    made: set[str] | None = None,
    known: dict[str, Path] | None = None,
) -> list[Outcome]:
    """Write one new artifact under `out_dir/<id>/` per usable failed attempt of `artifact`.

    With `max_new`, stop once `made` (the ids created or found in `out_dir`, shared across calls) has that
    many: a re-run finds the same artifacts in the same order and makes no more.
    """
    settings = settings or GradeSettings()
    outcomes, todo = plan_higher_order(artifact, settings)
    combined: list[tuple[str, str | None, str | None]] = []
    if todo and not (max_new is not None and len(made or ()) >= max_new):
        with open_sandbox(source) as sb:
            combined = combine_fixes(sb, artifact, [(name, code) for name, _, code in todo], settings)
    return outcomes + write_higher_order(artifact, source, out_dir, todo, combined, seen=seen, max_new=max_new,
                                         made=made, known=known)


def combine_fixes(sandbox: Sandbox, artifact: Artifact, todo: list[tuple[str, str]],
                  settings: GradeSettings) -> list[tuple[str, str | None, str | None]]:
    """The sandbox part: for each (attempt, code diff), (attempt, combined bug diff, None) or (attempt, None,
    why the fix does not apply)."""
    out: list[tuple[str, str | None, str | None]] = []
    for name, code in todo:
        try:
            out.append((name, combined_bug_diff(sandbox, artifact, code, settings), None))
        except PatchError as e:
            out.append((name, None, str(e)))
    return out


def plan_higher_order(artifact: Artifact, settings: GradeSettings
                      ) -> tuple[list[Outcome], list[tuple[str, dict[str, Any], str]]]:
    """(the attempts skipped with why, the usable failed ones as (attempt, eval.json, code part of the fix))."""
    parent_meta = artifact.metadata
    outcomes: list[Outcome] = []
    attempts = completed_attempts(artifact)

    def skip(name: str, reason: str) -> None:
        outcomes.append(Outcome(str(artifact.path), name, "skipped", reason))

    if parent_meta.order >= MAX_ORDER:
        for d in attempts:
            skip(d.name, f"the artifact has order {parent_meta.order}; higher-order bugs stop at order {MAX_ORDER}")
        return outcomes, []
    todo: list[tuple[str, dict[str, Any], str]] = []
    for d in attempts:
        record = read_eval(artifact, d.name) or {}
        if record.get("passed"):
            skip(d.name, "the attempt passed")
            continue
        fix = read_fix(artifact, d.name)
        if fix is None:
            skip(d.name, f"no {FIX}")
            continue
        try:
            code = code_part(fix, artifact, settings)
        except PatchError as e:
            skip(d.name, f"the fix is not a valid diff: {e}")
            continue
        if not code.strip():
            skip(d.name, NO_CODE_CHANGE)
            continue
        todo.append((d.name, record, code))
    return outcomes, todo


def write_higher_order(artifact: Artifact, source: RepoSource, out_dir: Path,
                       todo: list[tuple[str, dict[str, Any], str]],
                       combined_diffs: list[tuple[str, str | None, str | None]], *, seen: set[str] | None = None,
                       max_new: int | None = None, made: set[str] | None = None,
                       known: dict[str, Path] | None = None) -> list[Outcome]:
    """Write the artifacts of `todo` from their combined diffs ((attempt, diff, None) or (attempt, None,
    why the fix does not apply)), in attempt order, up to `max_new` in `made`; duplicates of `seen` skipped,
    and so are the ids of `known` (artifacts made elsewhere before: id → directory)."""
    seen = seen if seen is not None else set()
    known = known or {}
    made = made if made is not None else set()
    parent_meta = artifact.metadata
    outcomes: list[Outcome] = []

    def skip(name: str, reason: str) -> None:
        outcomes.append(Outcome(str(artifact.path), name, "skipped", reason))

    def full() -> bool:
        return max_new is not None and len(made) >= max_new

    if not todo:
        return outcomes
    if full():
        for name, _, _ in todo:
            skip(name, f"the limit of {max_new} higher-order artifact(s) is reached")
        return outcomes
    texts = artifact.core_texts()
    by_name = {name: (diff, error) for name, diff, error in combined_diffs}
    for name, record, code in todo:
        if full():
            skip(name, f"the limit of {max_new} higher-order artifact(s) is reached")
            continue
        combined, error = by_name[name]
        if combined is None:
            skip(name, f"the fix does not apply: {error}")
            continue
        if not combined.strip():
            skip(name, "the fix's code undoes the whole bug (it failed for another reason)")
            continue
        if _normalized(combined) == _normalized(artifact.bug_diff):
            skip(name, "the fix's code changes nothing the repository tracks")
            continue
        new_texts = dict(texts, **{BUG_DIFF: combined,
                                   TEST_FILES: "".join(f"{f}\n" for f in artifact.test_files)})
        new_id = content_id(new_texts)
        dest = own_dir(Path(out_dir) / new_id, "the artifact directory")
        if dest.exists() and not (dest / METADATA).is_file():
            shutil.rmtree(dest)  # written by a run that was killed before it finished: make it again
        if new_id in known and not dest.exists():
            outcomes.append(Outcome(str(artifact.path), name, "skipped",
                                    f"made before: {known[new_id]} is the same combined diff", id=new_id))
            continue
        if new_id in seen or dest.exists():
            if dest.exists():
                made.add(new_id)
            outcomes.append(Outcome(str(artifact.path), name, "duplicate",
                                    "the same combined diff was already made into an artifact",
                                    path=str(dest), id=new_id))
            continue
        seen.add(new_id)
        made.add(new_id)
        solver_info = record.get("solver_info") or {}
        meta = Metadata(
            id=new_id, repo=source, base_commit=parent_meta.base_commit, strategy=STRATEGY,
            order=parent_meta.order + 1, parent=artifact.id,
            injector={"agent": STRATEGY, "solver": record.get("solver"), "model": solver_info.get("model"),
                      "parent_strategy": parent_meta.strategy},
            extra={"parent_attempt": name, "parent_path": str(artifact.path.resolve())},
        )
        create_artifact(dest, bug_diff=combined, weaken_diff=texts[WEAKEN_DIFF],
                        test_script=texts[TEST_SCRIPT], test_files=artifact.test_files,
                        test_parser=texts[TEST_PARSER], metadata=meta)
        outcomes.append(Outcome(str(artifact.path), name, "created",
                                f"order {meta.order} from attempt {name} ({record.get('solver', '?')})",
                                path=str(dest), id=new_id))
    return outcomes


def failed_attempts(artifact: Artifact) -> int:
    """How many finished attempts of the artifact failed."""
    return sum(1 for d in completed_attempts(artifact) if not (read_eval(artifact, d.name) or {}).get("passed"))


def make_all(items: list[tuple[Artifact, RepoSource]], out_dir: Path,
             open_sandbox: Callable[[RepoSource], Sandbox] | None = None, *, settings: GradeSettings | None = None,
             max_new: int | None = None, executor: "Executor | None" = None,
             sandbox: tuple[str, SandboxOptions] | None = None, validator: "Validator | None" = None,
             known: dict[str, Path] | None = None) -> list[Outcome]:
    """`make_higher_order` over many artifacts, duplicates detected across all of them.

    Artifacts are taken in order of how often their attempts failed (most first, then by id), so that with
    `max_new` the limit goes to the bugs the solver got wrong most often. With `executor` (and `sandbox`, the
    backend and options its units open sandboxes with), each artifact's fixes are combined as one unit, in
    parallel; the artifacts are still written here, in that order, so the outcome is the same. With
    `validator`, every artifact made (or found made by an earlier, perhaps killed, run) is validated and its
    outcome says whether it is valid. `known` (`known_artifacts`): artifacts made before, elsewhere (an
    earlier round's), not made again here.
    """
    outcomes = _make_all(items, out_dir, open_sandbox, settings=settings, max_new=max_new, executor=executor,
                         sandbox=sandbox, known=known)
    if validator is not None:
        validate_made(outcomes, validator, executor)
    return outcomes


def validate_made(outcomes: list[Outcome], validator: "Validator", executor: "Executor | None" = None) -> None:
    """Validate the artifacts `outcomes` made, once each (up-to-date ones are skipped), and record the verdicts."""
    from ..validate import validate_all

    first: dict[str, Outcome] = {}
    for o in outcomes:
        if o.path and (o.status == "created" or (o.status == "duplicate" and Path(o.path).is_dir())):
            first.setdefault(o.path, o)
    if not first:
        return
    new = [Artifact(p) for p in first]
    reports = validate_all([(a, a.metadata.repo) for a in new], validator, executor=executor)
    verdicts: dict[str, tuple[bool, str | None]] = {}
    for path, rep in zip(first, reports):
        failed = next((c for c in rep["checks"] if c["status"] == "failed"), None)
        verdicts[path] = (rep["valid"], f"{failed['name']}: {failed['message']}" if failed else None)
    for o in first.values():
        o.valid, o.invalid_because = verdicts[o.path]


def known_artifacts(dirs: list[Path], out_dir: Path) -> dict[str, Path]:
    """id → directory of the artifacts found below `dirs` (at any depth), except those in `out_dir`, which
    is this run's own output (found there, an artifact counts as made by this run)."""
    from ..store.artifact import find_artifacts

    missing = [d for d in dirs if not Path(d).is_dir()]
    if missing:
        raise SsrkitError(f"--known {missing[0]}: no such directory")
    own = Path(out_dir).resolve()
    out: dict[str, Path] = {}
    for a in find_artifacts(list(dirs)) if dirs else []:
        if a.path.resolve().parent != own:
            out.setdefault(a.id, a.path)
    return out


def _make_all(items, out_dir, open_sandbox, *, settings, max_new, executor, sandbox, known=None) -> list[Outcome]:
    if not items:
        return []
    if max_new is not None and max_new < 0:
        raise SsrkitError("--max must be at least 0")
    settings = settings or GradeSettings()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    made: set[str] = set()
    out: list[Outcome] = []
    ranked = sorted(items, key=lambda item: (-failed_attempts(item[0]), item[0].id, str(item[0].path)))
    if executor is None:
        assert open_sandbox is not None, "make_all needs open_sandbox or an executor"
        for artifact, source in ranked:
            if not any_complete(artifact):
                out.append(Outcome(str(artifact.path), "-", "skipped", "no finished attempts: run `ssrkit solve` first"))
                continue
            out.extend(make_higher_order(artifact, source, out_dir, open_sandbox, settings=settings, seen=seen,
                                         max_new=max_new, made=made, known=known))
        return out
    from ..executor import run_units

    assert sandbox is not None, "make_all with an executor needs sandbox=(backend, options)"
    plans = [plan_higher_order(a, settings) if any_complete(a) else None
             for a, _ in ranked]
    busy = [k for k, p in enumerate(plans) if p is not None and p[1]]
    combos = run_units(executor, combine_unit, [
        (*sandbox, executor.artifact_ref(ranked[k][0].path, skip=OUTPUT_DIRS),
         executor.source_ref(ranked[k][1]), [(name, code) for name, _, code in plans[k][1]], settings)  # type: ignore[index]
        for k in busy])
    by_k = dict(zip(busy, combos))
    for k, (artifact, source) in enumerate(ranked):
        plan = plans[k]
        if plan is None:
            out.append(Outcome(str(artifact.path), "-", "skipped", "no finished attempts: run `ssrkit solve` first"))
            continue
        out.extend(plan[0])
        out.extend(write_higher_order(artifact, source, out_dir, plan[1], by_k.get(k, []), seen=seen,
                                      max_new=max_new, made=made, known=known))
    return out


def check_out_dir(out_dir: Path, parents: list[Artifact]) -> None:
    for a in parents:
        try:
            Path(out_dir).resolve().relative_to(a.path.resolve())
        except ValueError:
            continue
        raise SsrkitError(f"--out {out_dir} is inside the artifact {a.path}; choose a directory outside it")


# -- higher-order: stack one artifact's failed fixes on its bug ---------------------------------------

def combine_unit(backend: str, options: SandboxOptions, ref: ArtifactRef, sref: SourceRef,
                 todo: list[tuple[str, str]], settings: Any) -> list[tuple[str, str | None, str | None]]:
    """For each (attempt, code diff): (attempt, combined bug diff, None) or (attempt, None, why not)."""
    from ..sandbox import open_sandbox

    with scratch_for(ref) as scratch:
        path = ref.materialize(scratch) if scratch is not None else Path(ref.origin)
        source = sref.materialize()
        with open_sandbox(source, backend, options) as sb:
            out = combine_fixes(sb, Artifact(path), todo, settings)
    return relabel(out, path_mapping(path, ref, source, sref))
