"""Unified diffs: parse, list touched files, check path safety, reverse, apply with `git apply`.

Parsing uses `unidiff`; applying uses `git apply` (the same engine that produced the diffs), whose terse
errors are translated into messages that name the file and hunk that failed.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from .errors import PatchError


@dataclass(frozen=True)
class FileChange:
    path: str  # the path the change is about: target path, or source path for a deletion
    source: str | None  # path before (None for an added file)
    target: str | None  # path after (None for a deleted file)
    added: bool
    removed: bool
    renamed: bool
    binary: bool


def _strip_prefix(p: str | None) -> str | None:
    if p is None or p == "/dev/null":
        return None
    p = p.strip()
    if p.startswith('"') and p.endswith('"'):
        p = p[1:-1]
    if p.startswith(("a/", "b/")):
        p = p[2:]
    return p


def parse(diff: str, label: str = "diff") -> list[FileChange]:
    """The files a diff changes. Raises PatchError (naming `label`) when it is not a unified diff."""
    if not diff.strip():
        return []
    try:
        patchset = PatchSet(diff)
    except UnidiffParseError as e:
        raise PatchError(f"{label} is not a valid unified diff: {e}") from None
    if not patchset and diff.strip():
        raise PatchError(f"{label} has text but no file changes: is it a unified diff (`git diff` output)?")
    changes = []
    for pf in patchset:
        source = _strip_prefix(pf.source_file)
        target = _strip_prefix(pf.target_file)
        added = pf.is_added_file or source is None
        removed = pf.is_removed_file or target is None
        renamed = bool(getattr(pf, "is_rename", False)) and source != target
        changes.append(FileChange(
            path=(source if removed else target) or "",
            source=None if added else source,
            target=None if removed else target,
            added=added,
            removed=removed,
            renamed=renamed,
            binary=bool(getattr(pf, "is_binary_file", False)),
        ))
    return changes


def touched_files(diff: str, label: str = "diff") -> list[str]:
    """Every repository path a diff reads or writes (both sides of a rename), in order, unique."""
    out: list[str] = []
    for c in parse(diff, label):
        for p in (c.source, c.target):
            if p and p not in out:
                out.append(p)
    return out


def unsafe_path_reason(path: str) -> str | None:
    """Why `path` may not appear in a diff (None when it is fine)."""
    if not path:
        return "empty path"
    if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        return "absolute path"
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        return "path escapes the repository with '..'"
    if parts and parts[0] == ".git":
        return "path inside .git"
    return None


_HEADER_PATH = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|rename (?:from|to) (.+)|copy (?:from|to) (.+))$")


def check_paths(diff: str, label: str = "diff") -> list[str]:
    """Reject a diff whose paths escape the repository; return the touched files."""
    files = touched_files(diff, label)
    names = list(files)
    for line in diff.splitlines():
        m = _HEADER_PATH.match(line)
        if m:
            names.extend(g for g in m.groups() if g)
    for name in names:
        reason = unsafe_path_reason(name)
        if reason:
            raise PatchError(f"{label} touches {name!r}: {reason}; every path must be relative to the repository root")
    return files


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@(.*)$")


def reverse(diff: str) -> str:
    """The diff that undoes `diff` (what `git apply -R` would apply), as text.

    Within each run of changed lines the removed lines come first, as git writes them.
    """
    if "GIT binary patch" in diff:
        raise PatchError("cannot reverse a binary patch")
    out: list[str] = []
    lines = diff.splitlines(keepends=True)
    i = 0
    pending_minus: str | None = None
    while i < len(lines):
        line = lines[i]
        bare = line.rstrip("\r\n")
        nl = line[len(bare):]
        m = _HUNK.match(bare)
        if m:
            a, b, c, d, tail = m.groups()
            old = f"{c}" + (f",{d}" if d is not None else "")
            new = f"{a}" + (f",{b}" if b is not None else "")
            out.append(f"@@ -{old} +{new} @@{tail}{nl}")
            old_left = int(b) if b is not None else 1
            new_left = int(d) if d is not None else 1
            i += 1
            i = _reverse_hunk_body(lines, i, old_left, new_left, out)
            continue
        if bare.startswith("diff --git "):
            mm = re.match(r"^diff --git (a/\S+) (b/\S+)$", bare)
            if mm:
                out.append(f"diff --git a/{mm.group(2)[2:]} b/{mm.group(1)[2:]}{nl}")
            else:
                out.append(line)
        elif bare.startswith("--- "):
            pending_minus = bare[4:]
            # the matching +++ line follows; emit both when we see it
        elif bare.startswith("+++ ") and pending_minus is not None:
            plus = bare[4:]
            out.append(f"--- {_swap_side(plus, 'a/')}{nl}")
            out.append(f"+++ {_swap_side(pending_minus, 'b/')}{nl}")
            pending_minus = None
        elif bare.startswith("new file mode "):
            out.append(f"deleted file mode {bare[len('new file mode '):]}{nl}")
        elif bare.startswith("deleted file mode "):
            out.append(f"new file mode {bare[len('deleted file mode '):]}{nl}")
        elif bare.startswith("old mode "):
            out.append(f"new mode {bare[len('old mode '):]}{nl}")
        elif bare.startswith("new mode "):
            out.append(f"old mode {bare[len('new mode '):]}{nl}")
        elif bare.startswith("rename from "):
            out.append(f"rename to {bare[len('rename from '):]}{nl}")
        elif bare.startswith("rename to "):
            out.append(f"rename from {bare[len('rename to '):]}{nl}")
        elif bare.startswith("index "):
            mm = re.match(r"^index ([0-9a-fA-F]+)\.\.([0-9a-fA-F]+)(.*)$", bare)
            out.append(f"index {mm.group(2)}..{mm.group(1)}{mm.group(3)}{nl}" if mm else line)
        else:
            out.append(line)
        i += 1
    # rename from/to come in order from→to; after swapping they read to→from: put "from" first again
    text = "".join(out)
    text = re.sub(r"^(rename to .*\n)(rename from .*\n)", r"\2\1", text, flags=re.M)
    text = re.sub(r"^(new mode .*\n)(old mode .*\n)", r"\2\1", text, flags=re.M)
    return text


def _swap_side(path: str, prefix: str) -> str:
    if path == "/dev/null" or path.startswith("/dev/null"):
        return "/dev/null"
    if path.startswith(("a/", "b/")):
        return prefix + path[2:]
    return path


def _reverse_hunk_body(lines: list[str], i: int, old_left: int, new_left: int, out: list[str]) -> int:
    """Copy one hunk body with + and - swapped; return the index after it."""
    minus: list[str] = []  # reversed '-' lines (former '+')
    plus: list[str] = []  # reversed '+' lines (former '-')

    def flush() -> None:
        out.extend(minus)
        out.extend(plus)
        minus.clear()
        plus.clear()

    last: list[str] | None = None
    while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
        line = lines[i]
        tag, rest = line[:1], line[1:]
        if tag == "\\":  # "\ No newline at end of file" belongs to the line before it
            (last if last is not None else out).append(line)
        elif tag == "+":
            minus.append("-" + rest)
            last = minus
            new_left -= 1
        elif tag == "-":
            plus.append("+" + rest)
            last = plus
            old_left -= 1
        elif tag in (" ", "\n", "\r", ""):
            flush()
            out.append(line if tag == " " else " " + line)
            last = out
            old_left -= 1
            new_left -= 1
        else:
            break
        i += 1
    flush()
    return i


_FAILED_AT = re.compile(r"error: patch failed: (.+):(\d+)")
_NOT_APPLY = re.compile(r"error: (.+): patch does not apply")
_NO_FILE = re.compile(r"error: (.+): (?:No such file or directory|does not exist in index)")
_EXISTS = re.compile(r"error: (.+): already exists in (?:working directory|index)")
_CORRUPT = re.compile(r"(?:error|fatal): corrupt patch at line (\d+)")


def explain_apply_error(stderr: str, label: str) -> str:
    """Turn `git apply`'s stderr into one actionable sentence naming the file and hunk."""
    m = _FAILED_AT.search(stderr)
    if m:
        return (f"{label} does not apply: the hunk at {m.group(1)} line {m.group(2)} does not match the file "
                f"(its context or removed lines differ from the code); regenerate the diff with `git diff` "
                f"against the same commit")
    m = _NO_FILE.search(stderr)
    if m:
        return f"{label} does not apply: it changes {m.group(1)}, which does not exist in the tree it is applied to"
    m = _EXISTS.search(stderr)
    if m:
        return f"{label} does not apply: it creates {m.group(1)}, which already exists"
    m = _NOT_APPLY.search(stderr)
    if m:
        return f"{label} does not apply to {m.group(1)}"
    m = _CORRUPT.search(stderr)
    if m:
        return (f"{label} is corrupt at line {m.group(1)} (hunk line counts do not match its body; "
                f"was it edited by hand?)")
    msg = " ".join(stderr.strip().split())[:400]
    return f"{label} does not apply: {msg or 'git apply failed'}"


def apply(repo: str | Path, diff: str, *, label: str = "diff", reverse: bool = False, check: bool = False) -> None:
    """Apply `diff` to the directory `repo` with `git apply`; raise PatchError explaining a failure."""
    if not diff.strip():
        return
    with tempfile.NamedTemporaryFile("w", suffix=".diff", delete=False, encoding="utf-8") as fh:
        fh.write(diff if diff.endswith("\n") else diff + "\n")
        name = fh.name
    try:
        cmd = git_apply_args(reverse=reverse, check=check)
        proc = subprocess.run([*cmd, name], cwd=str(repo), capture_output=True, text=True, errors="replace")
    finally:
        Path(name).unlink(missing_ok=True)
    if proc.returncode != 0:
        raise PatchError(explain_apply_error(proc.stderr, label))


def git_apply_args(reverse: bool = False, check: bool = False) -> list[str]:
    """The `git apply` flags ssrkit uses everywhere, for backends that run git inside a sandbox."""
    args = ["git", "apply", "--whitespace=nowarn"]
    if reverse:
        args.append("--reverse")
    if check:
        args.append("--check")
    return args


def split_by_file(diff: str, label: str = "diff") -> dict[str, str]:
    """One sub-diff per changed file (keyed by the file's path), each applicable on its own."""
    out: dict[str, str] = {}
    try:
        patchset = PatchSet(diff)
    except UnidiffParseError as e:
        raise PatchError(f"{label} is not a valid unified diff: {e}") from None
    for pf, change in zip(patchset, parse(diff, label)):
        text = str(pf)
        out[change.path] = text if text.endswith("\n") else text + "\n"
    return out
