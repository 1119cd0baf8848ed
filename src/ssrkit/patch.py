"""Unified diffs: parse, list touched files, check path safety, reverse, apply with `git apply`.

Parsing uses `unidiff`; applying uses `git apply` (the same engine that produced the diffs), whose terse
errors are translated into messages that name the file and hunk that failed.
"""

from __future__ import annotations

import functools
import os
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


#: Largest diff ssrkit parses or applies; a bigger one gets a clear verdict instead of costing memory.
MAX_DIFF_BYTES = 2 * 1024 * 1024

_C_ESCAPES = {"a": 7, "b": 8, "t": 9, "n": 10, "v": 11, "f": 12, "r": 13, '"': 34, "\\": 92}


def unquote(name: str) -> str:
    """A path as git means it: a name in double quotes is C-style quoted (`"b/c\\157nftest.py"`), octal
    escapes spelling UTF-8 bytes. The one decoder every path rule goes through, so a rule never sees a
    spelling that `git apply` would read as another file. Raises PatchError on a malformed quoted name."""
    if not (len(name) >= 2 and name.startswith('"') and name.endswith('"')):
        return name
    body = name[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out += ch.encode("utf-8", "surrogateescape")
            i += 1
            continue
        nxt = body[i + 1:i + 2]
        if nxt in _C_ESCAPES:
            out.append(_C_ESCAPES[nxt])
            i += 2
        elif re.fullmatch(r"[0-3][0-7]{2}", body[i + 1:i + 4]):
            out.append(int(body[i + 1:i + 4], 8))
            i += 4
        else:
            raise PatchError(f"malformed quoted path {name!r} (unknown escape)")
    return out.decode("utf-8", "surrogateescape")


def _quoted_prefix(text: str) -> tuple[str, str] | None:
    """Split `"quoted name" rest` into (the quoted name with its quotes, rest); None when not quoted."""
    if not text.startswith('"'):
        return None
    i = 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return text[:i + 1], text[i + 1:]
        i += 1
    raise PatchError(f"unterminated quoted path in {text[:200]!r}")


def _strip_prefix(p: str | None) -> str | None:
    """A `---`/`+++` name as `git apply -p1` reads it: unquoted, first path component dropped."""
    if p is None:
        return None
    p = p.strip()
    if p == "/dev/null":
        return None
    p = unquote(p)
    if p == "/dev/null":
        return None
    return p.split("/", 1)[1] if "/" in p else p


def _git_header_names(rest: str) -> list[str]:
    """Every name a `diff --git A B` line may mean (both sides, prefixes dropped)."""
    q = _quoted_prefix(rest)
    if q is not None:
        first, tail = q[0], q[1].strip()
        return [n for n in (_strip_prefix(first), _strip_prefix(tail)) if n]
    if ' "' in rest:
        first, _, second = rest.partition(' "')
        return [n for n in (_strip_prefix(first), _strip_prefix('"' + second)) if n]
    # unquoted names may hold spaces: every split into `a/X b/Y` is a candidate
    out = []
    for m in re.finditer(" ", rest):
        left, right = rest[:m.start()], rest[m.end():]
        for n in (_strip_prefix(left), _strip_prefix(right)):
            if n and n not in out:
                out.append(n)
    return out


_META = re.compile(r"^(rename|copy) (from|to) (.+)$")


def _header_names(diff: str) -> list[str]:
    """Paths named by git's extended header lines (`diff --git`, `rename from/to`, `copy from/to`)."""
    names: list[str] = []
    for line in diff.splitlines():
        line = line.rstrip("\r")
        if line.startswith("diff --git "):
            names.extend(_git_header_names(line[len("diff --git "):]))
        else:
            m = _META.match(line)
            if m:
                names.append(unquote(m.group(3).strip()))
    return names


def _git_paths(diff: str, label: str) -> list[str]:
    """The paths `git apply` itself reads from the diff (`--numstat`; nothing is applied)."""
    data = diff if diff.endswith("\n") else diff + "\n"
    proc = subprocess.run(["git", "apply", "--numstat", "-z", "-"], input=data.encode("utf-8", "surrogateescape"),
                          capture_output=True, cwd="/", env={**os.environ, "GIT_DIR": "/nonexistent-ssrkit"})
    if proc.returncode != 0:
        msg = " ".join(proc.stderr.decode("utf-8", "replace").split())[:400]
        raise PatchError(f"{label} is not a diff git can read: {msg or 'git apply --numstat failed'}")
    out = []
    fields = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    for f in fields:
        name = f.split("\t", 2)[2] if f.count("\t") >= 2 else f
        if name:
            out.append(name)
    return out


def check_size(diff: str, label: str = "diff") -> None:
    """Refuse a diff larger than MAX_DIFF_BYTES, with a verdict saying so."""
    n = len(diff) if len(diff) > MAX_DIFF_BYTES else len(diff.encode("utf-8", "surrogateescape"))
    if n > MAX_DIFF_BYTES:
        raise PatchError(f"{label} is {n / 1048576:.1f} MiB, over the {MAX_DIFF_BYTES // 1048576} MiB limit for a diff; "
                         f"a change that large is not a fix (generated or binary files do not belong in it)")


def parse(diff: str, label: str = "diff") -> list[FileChange]:
    """The files a diff changes. Raises PatchError (naming `label`) when it is not a unified diff, is too
    large, or names a path ssrkit and `git apply` would read differently."""
    if not diff.strip():
        return []
    check_size(diff, label)
    return list(_parse_cached(diff, label))


def _patchset(diff: str, label: str) -> PatchSet:
    """unidiff's parse; its error names the hunk that does not match its header (unidiff does not)."""
    try:
        return PatchSet(diff)
    except UnidiffParseError as e:
        where = bad_hunk(diff)
        raise PatchError(f"{label} is not a valid unified diff: {e}"
                         + (f": {where}; fix the counts in its @@ line, or make the diff again with `git diff`"
                            if where else "")) from None


def bad_hunk(diff: str) -> str | None:
    """The first hunk whose body does not hold the lines its `@@ -a,b +c,d @@` header counts, named by file,
    number and line of the diff; None when every hunk matches (the diff is wrong elsewhere)."""
    lines = diff.splitlines()
    path, nth, i = "?", 0, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            names = _git_header_names(line[len("diff --git "):])
            path, nth = (names[-1] if names else path), 0
        elif line.startswith("+++ "):
            path = _strip_prefix(line[4:].split("\t")[0]) or path
        m = _HUNK.match(line.rstrip("\r"))
        if not m:
            i += 1
            continue
        nth += 1
        want_old, want_new = int(m.group(2) or 1), int(m.group(4) or 1)
        old = new = 0
        j = i + 1
        while j < len(lines) and (old < want_old or new < want_new):
            tag = lines[j][:1]
            if tag not in (" ", "-", "+", "\\", ""):
                break
            old += tag in (" ", "-", "")
            new += tag in (" ", "+", "")
            j += 1
        if (old, new) != (want_old, want_new):
            return (f"hunk {nth} of {path} (line {i + 1} of the diff, {line.strip()!r}) counts {want_old} old and "
                    f"{want_new} new line(s), its body holds {old} and {new}")
        i = j
    return None


@functools.lru_cache(maxsize=32)
def _parse_cached(diff: str, label: str) -> tuple[FileChange, ...]:
    patchset = _patchset(diff, label)
    if not patchset and diff.strip() and not _header_names(diff):
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
    known = {p for c in changes for p in (c.source, c.target) if p} | set(_header_names(diff))
    for name in _git_paths(diff, label):
        if name not in known:
            raise PatchError(f"{label}: git reads the path {name!r}, which its headers do not name the same way; "
                             f"write paths as `git diff` does (a/ and b/ prefixes, C-style quoting)")
    return tuple(changes)


def touched_files(diff: str, label: str = "diff") -> list[str]:
    """Every repository path a diff reads or writes (both sides of a rename), in order, unique."""
    out: list[str] = []
    for c in parse(diff, label):
        for p in (c.source, c.target):
            if p and p not in out:
                out.append(p)
    return out


def unsafe_path_reason(path: str) -> str | None:
    """Why `path` may not appear in a diff (None when it is fine). `path` must already be unquoted."""
    if not path:
        return "empty path"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        return "path holds a control character"
    if any(0xDC80 <= ord(ch) <= 0xDCFF for ch in path):
        return "path is not valid UTF-8"
    if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        return "absolute path"
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        return "path escapes the repository with '..'"
    if any(p.lower() == ".git" for p in parts):
        return "path inside .git"
    return None


def check_paths(diff: str, label: str = "diff") -> list[str]:
    """Reject a diff whose paths escape the repository; return the touched files."""
    files = touched_files(diff, label)
    names = list(files) + _header_names(diff)
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
    patchset = _patchset(diff, label)
    for pf, change in zip(patchset, parse(diff, label)):
        text = str(pf)
        out[change.path] = text if text.endswith("\n") else text + "\n"
    return out
