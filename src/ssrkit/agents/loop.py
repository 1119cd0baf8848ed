"""The agent loop shared by the injector and the solver (SPEC §5).

Linear and small on purpose: a system and a task message, then repeatedly ask the model for one tool call,
run it in the sandbox, and append its output (plus a one-line budget notice) as a user message. The
trajectory is the state — it is saved after every step, so a killed run keeps what it did.

A tool call is plain text that any model can write, each tag ending its line:

    <tool: bash>
    ls -la
    </tool>

    <tool: edit path="src/x.py">
    <<<<<<< SEARCH
    exact lines now in the file
    =======
    the lines to put instead
    >>>>>>> REPLACE
    </tool>

    <tool: create path="src/new.py">
    full file content
    </tool>

    <tool: submit>
    </tool>

Prose may surround the call; exactly one call per reply. A reply without a valid call gets a correction
message; `max_format_errors` of them in a row end the run.
"""

from __future__ import annotations

import logging
import posixpath
import re
import shlex
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable

from ..errors import SsrkitError
from ..patch import unsafe_path_reason
from ..sandbox.base import Sandbox
from .client import SAMPLING_KEYS, ContextLengthError, ModelClient, ModelError
from .trajectory import Trajectory

log = logging.getLogger("ssrkit.agents")

TOOLS = ("bash", "edit", "create", "submit")


@dataclass
class AgentConfig:
    """Limits of one agent run; the `[agent]` section of ssrkit.toml. 0 means "no limit" where noted."""

    max_turns: int = 50  # assistant turns
    command_timeout: float = 120.0  # seconds per bash call; the whole process group is killed after it
    context_tokens: int | None = 65536  # stop with `context_limit` when the conversation reaches it (0: none)
    wall_clock_s: float | None = 3600.0  # whole run (0: none)
    max_format_errors: int = 3  # consecutive malformed replies
    output_chars: int = 10_000  # tool output kept per call (head and tail)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> "AgentConfig":
        """Read a TOML section; sub-tables (e.g. a model table) are left to their owners."""
        known = {f.name for f in fields(cls)}
        values = {}
        for key, value in (data or {}).items():
            if isinstance(value, dict) or key in SAMPLING_KEYS:  # sub-tables and sampling: their owners'
                continue
            if key not in known:
                raise SsrkitError(f"[agent]: unknown setting {key!r}; known: {', '.join(sorted(known))}")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise SsrkitError(f"[agent] {key} must be a non-negative number, got {value!r}")
            values[key] = value
        cfg = cls(**values)
        cfg.context_tokens = int(cfg.context_tokens) if cfg.context_tokens else None
        cfg.wall_clock_s = float(cfg.wall_clock_s) if cfg.wall_clock_s else None
        for key in ("max_turns", "max_format_errors", "output_chars"):
            if int(getattr(cfg, key)) < 1:
                raise SsrkitError(f"[agent] {key} must be at least 1")
            setattr(cfg, key, int(getattr(cfg, key)))
        if cfg.command_timeout <= 0:
            raise SsrkitError("[agent] command_timeout must be positive")
        return cfg

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- parsing a reply --------------------------------------------------------------------------------

class FormatError(Exception):
    """The reply holds no usable tool call; the message tells the model how to fix it."""


class ToolError(Exception):
    """A well-formed call that could not be carried out (missing file, ambiguous edit, bad path)."""


@dataclass
class ToolCall:
    name: str
    body: str = ""
    path: str | None = None
    blocks: list[tuple[str, str]] = field(default_factory=list)  # edit: (search, replace) pairs


_OPEN = re.compile(r"<tool:[ \t]*(?P<name>[\w-]+)(?P<attrs>[^>\n]*?)[ \t]*(?P<selfclose>/?)>[ \t]*$", re.M)
_ATTR = re.compile(r"""(\w+)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>/]+))""")
_CLOSE = "</tool>"

FORMAT_HELP = """Write exactly one tool call per reply, the opening and closing tags alone on their lines:

<tool: bash>
your command
</tool>

Other tools: <tool: edit path="FILE"> with <<<<<<< SEARCH / ======= / >>>>>>> REPLACE blocks, \
<tool: create path="FILE"> with the full content, and <tool: submit> when you are done."""


def parse_tool_call(text: str, finish_reason: str | None = None) -> ToolCall:
    """The one tool call in an assistant reply; FormatError says what is wrong with it."""
    opens = list(_OPEN.finditer(text))
    if not opens:
        if finish_reason == "length":
            raise FormatError("Your reply was cut off at the token limit before it made a tool call. "
                              "Think more briefly and make the call.")
        if "<tool" in text:
            raise FormatError("I could not read your tool call: its opening tag, like `<tool: bash>`, must "
                              "end its line, with the command or content on the lines below it.")
        raise FormatError("Your reply contains no tool call, so nothing was run.")
    if len(opens) > 1:
        raise FormatError(f"Your reply contains {len(opens)} tool calls; make exactly one per reply and "
                          f"wait for its output. Nothing was run.")
    m = opens[0]
    name = m["name"].lower()
    if name not in TOOLS:
        raise FormatError(f"There is no tool {m['name']!r}; the tools are {', '.join(TOOLS)}.")
    attrs = {a.lower(): (q or s or u) for a, q, s, u in _ATTR.findall(m["attrs"])}
    if m["selfclose"]:
        body = ""
    else:
        rest = text[m.end():]
        end = rest.rfind(_CLOSE)
        if end == -1:
            if finish_reason == "length":
                raise FormatError("Your reply was cut off at the token limit before `</tool>`, so nothing was "
                                  "run. Make the call shorter (e.g. split a large file into several edits).")
            end = len(rest)  # a stop sequence at "</tool>" drops the closing tag: take the call as written
        body = rest[:end]
        body = body[1:] if body.startswith("\n") else body
        body = body[:-1] if body.endswith("\n") else body
    call = ToolCall(name=name, body=body, path=attrs.get("path"))
    if name == "bash" and not body.strip():
        raise FormatError("The bash call is empty: put the command between the tags.")
    if name in ("edit", "create") and not call.path:
        raise FormatError(f'The {name} call needs the file: <tool: {name} path="relative/path">.')
    if name == "edit":
        call.blocks = parse_edit_blocks(body)
    return call


_SEARCH = re.compile(r"<{5,}[ \t]*SEARCH")
_DIVIDER = re.compile(r"={5,}")
_REPLACE = re.compile(r">{5,}[ \t]*REPLACE")


def parse_edit_blocks(body: str) -> list[tuple[str, str]]:
    """SEARCH/REPLACE blocks of an edit call, in order. Text between blocks is not allowed."""
    blocks: list[tuple[str, str]] = []
    state, search, replace = None, [], []
    for line in body.split("\n"):
        marker = line.strip()
        if _SEARCH.fullmatch(marker) and state is None:
            state, search, replace = "search", [], []
        elif _DIVIDER.fullmatch(marker) and state == "search":
            state = "replace"
        elif _REPLACE.fullmatch(marker) and state == "replace":
            blocks.append(("\n".join(search), "\n".join(replace)))
            state = None
        elif state == "search":
            search.append(line)
        elif state == "replace":
            replace.append(line)
        elif marker:
            raise FormatError(f"The edit call has text outside a SEARCH/REPLACE block: {marker[:80]!r}. "
                              f"Each block is `<<<<<<< SEARCH`, the exact old lines, `=======`, the new lines, "
                              f"`>>>>>>> REPLACE`.")
    if state is not None:
        missing = "=======" if state == "search" else ">>>>>>> REPLACE"
        raise FormatError(f"The edit call's last block is not finished: `{missing}` is missing.")
    if not blocks:
        raise FormatError("The edit call has no SEARCH/REPLACE block.")
    return blocks


def apply_blocks(content: str, blocks: list[tuple[str, str]], path: str) -> str:
    """Replace each block's unique SEARCH text; all blocks or none (ToolError explains a miss)."""
    for i, (search, replace) in enumerate(blocks, 1):
        which = f"block {i}" if len(blocks) > 1 else "the SEARCH text"
        if not search.strip():
            raise ToolError(f"{which} of the edit is empty; use create to write a whole file.")
        count = content.count(search)
        if count == 0 and "\r\n" in content:  # a CRLF file: match its line endings
            search, replace = search.replace("\n", "\r\n"), replace.replace("\n", "\r\n")
            count = content.count(search)
        if count == 0:
            line = _loose_match(content, search)
            hint = (f" It matches line {line} if whitespace is ignored: copy the indentation exactly."
                    if line else f" Look at the file first (e.g. `grep -n` or `sed -n '1,60p' {path}`) and "
                                 f"copy the lines exactly.")
            raise ToolError(f"{which} does not occur in {path}; nothing was changed.{hint}")
        if count > 1:
            raise ToolError(f"{which} occurs {count} times in {path}; add surrounding lines so it is unique. "
                            f"Nothing was changed.")
        start = content.index(search)
        end = start + len(search)
        if not replace and (start == 0 or content[start - 1] == "\n") and content[end:end + 1] == "\n":
            end += 1  # deleting whole lines: take their newline too
        content = content[:start] + replace + content[end:]
    return content


def _loose_match(content: str, search: str) -> int | None:
    want = [ln.strip() for ln in search.strip("\n").split("\n")]
    have = [ln.strip() for ln in content.split("\n")]
    for i in range(len(have) - len(want) + 1):
        if have[i:i + len(want)] == want:
            return i + 1
    return None


def truncate(text: str, limit: int) -> str:
    """Keep the head and tail of a long output, saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


# -- the loop ---------------------------------------------------------------------------------------

class _Done(Exception):
    def __init__(self, status: str, error: str | None = None):
        super().__init__(status)
        self.status, self.error = status, error


class Agent:
    """Runs one conversation between a model and a sandbox until submit or a limit.

    on_submit: called when the model submits; returns None to accept, or a message that goes back to the
        model (the run continues) — e.g. the injector's "bug_inject.diff is missing".
    writable_dirs: absolute directories outside the repository that edit/create may write to (the
        injector's submission directory). Every other path must be relative and stay inside the repository.
    """

    def __init__(self, client: ModelClient, sandbox: Sandbox, config: AgentConfig | None = None, *,
                 on_submit: Callable[[], str | None] | None = None, writable_dirs: tuple[str, ...] = ()):
        self.client = client
        self.sandbox = sandbox
        self.config = config or AgentConfig()
        self.on_submit = on_submit
        self.writable_dirs = tuple(posixpath.normpath(d) for d in writable_dirs)

    def run(self, trajectory: Trajectory, system: str, task: str) -> Trajectory:
        """Run to the end; the trajectory says how it ended. Re-raises only ModelError and Ctrl-C."""
        self.traj = trajectory
        self._format_errors = 0
        self._t0 = time.monotonic()
        trajectory.add_message("system", system)
        trajectory.add_message("user", task)
        try:
            while True:
                self.step()
        except _Done as done:
            trajectory.finish(done.status, done.error)
        except ModelError as e:  # the endpoint is unusable: every other run would fail too
            trajectory.finish("error", str(e))
            raise
        except KeyboardInterrupt:
            trajectory.finish("error", "interrupted")
            raise
        except Exception as e:  # noqa: BLE001 - a broken sandbox or a bug: recorded; the caller decides
            log.warning("agent run failed: %s: %s", type(e).__name__, e)
            trajectory.finish("error", f"{type(e).__name__}: {e}")
        return trajectory

    def step(self) -> None:
        """One model call and, when the reply holds a valid call, its execution."""
        cfg = self.config
        if len(self.traj.turns) >= cfg.max_turns:
            raise _Done("max_turns")
        if self._time_left() <= 0:
            raise _Done("timeout")
        if cfg.context_tokens and self._tokens_used() >= cfg.context_tokens:
            raise _Done("context_limit")
        try:
            completion = self.client.complete(self.traj.messages)
        except ContextLengthError as e:
            raise _Done("context_limit", str(e)) from None
        self.traj.add_turn(completion)
        try:
            call = parse_tool_call(completion.text, completion.finish_reason)
        except FormatError as e:
            self._format_errors += 1
            self._observe(f"{e}\n\n{FORMAT_HELP}")
            if self._format_errors >= cfg.max_format_errors:
                raise _Done("format_errors") from None
            return
        self._format_errors = 0
        if call.name == "submit":
            problem = self.on_submit() if self.on_submit else None
            if problem is None:
                self.traj.set_submission({"turn": len(self.traj.turns)})
                raise _Done("submitted")
            self._observe(problem)
            return
        try:
            output = self.execute(call)
        except ToolError as e:
            output = f"Error: {e}"
        self._observe(output)

    # -- tools -----------------------------------------------------------------------------------
    def execute(self, call: ToolCall) -> str:
        if call.name == "bash":
            return self._bash(call.body)
        path = self._path(call.path or "")
        if call.name == "edit":
            old = self._read(path)
            if old is None:
                raise ToolError(f"{path} does not exist; use create to make a new file.")
            self._write(path, apply_blocks(old, call.blocks, path))
            return f"Edited {path} ({len(call.blocks)} block{'s' if len(call.blocks) > 1 else ''} replaced)."
        content = call.body + ("\n" if call.body and not call.body.endswith("\n") else "")
        existed = self._read(path) is not None
        parent = posixpath.dirname(path)
        if parent and not existed:
            self.sandbox.run(f"mkdir -p -- {shlex.quote(parent)}", timeout=30)
        self._write(path, content)
        lines = content.count("\n")
        return f"{'Overwrote' if existed else 'Created'} {path} ({lines} line{'s' if lines != 1 else ''})."

    def _bash(self, command: str) -> str:
        timeout = max(1.0, min(self.config.command_timeout, self._time_left()))
        res = self.sandbox.run(command, timeout=timeout, stdin="")
        text = res.output[:-1] if res.output.endswith("\n") else res.output
        output = truncate(text, self.config.output_chars) if text else "(no output)"
        if res.timed_out:
            head = (f"The command timed out after {timeout:g} s and was killed, with every process it "
                    f"started. Avoid commands that wait for input or run servers; narrow it down or make it "
                    f"faster. Output before it was killed:")
        else:
            head = f"exit code {res.exit_code}"
        return f"{head}\n<output>\n{output}\n</output>"

    def _path(self, raw: str) -> str:
        """A repository-relative path, or an absolute one inside a writable directory."""
        raw = raw.strip()
        if raw.startswith("/"):
            norm = posixpath.normpath(raw)
            if any(norm == d or norm.startswith(d.rstrip("/") + "/") for d in self.writable_dirs):
                return norm
            root = getattr(self.sandbox, "root", "").rstrip("/")
            hint = (f" (inside the repository that is {norm[len(root) + 1:]!r})"
                    if root and norm.startswith(root + "/") else "")
            raise ToolError(f"{raw}: absolute paths are not allowed; give the path relative to the "
                            f"repository root{hint}.")
        reason = unsafe_path_reason(raw)
        if reason:
            raise ToolError(f"{raw!r}: {reason}; give a path inside the repository, relative to its root.")
        return posixpath.normpath(raw)

    def _read(self, path: str) -> str | None:
        try:
            data = self.sandbox.read_file(path)
        except FileNotFoundError:
            return None
        except OSError as e:  # a directory, no permission: the model can act on that
            raise ToolError(f"cannot read {path}: {e.strerror or e}") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{path} is not UTF-8 text; change it with bash instead.") from None

    def _write(self, path: str, content: str) -> None:
        try:
            self.sandbox.write_file(path, content)
        except OSError as e:
            raise ToolError(f"cannot write {path}: {e.strerror or e}") from None

    # -- budget ----------------------------------------------------------------------------------
    def _observe(self, text: str) -> None:
        self.traj.add_message("user", f"{text}\n{self._budget_notice()}")

    def _time_left(self) -> float:
        if not self.config.wall_clock_s:
            return float("inf")
        return self.config.wall_clock_s - (time.monotonic() - self._t0)

    def _tokens_used(self) -> int:
        """Context size of the next request: the server's count for the last call, plus what came after."""
        msgs = self.traj.messages
        last = self.traj.turns[-1] if self.traj.turns else None
        if last and last["usage"].get("total_tokens"):
            used = int(last["usage"]["total_tokens"])
            after = msgs[last["message_index"] + 1:]
        else:
            used, after = 0, msgs  # no usage reported: estimate ~4 characters per token
        return used + sum(len(m["content"]) for m in after) // 4

    def _budget_notice(self) -> str:
        cfg = self.config
        done = len(self.traj.turns)
        left = cfg.max_turns - done
        parts = [f"turn {done}/{cfg.max_turns}, {left} left"]
        if cfg.context_tokens:
            parts.append(f"context {self._tokens_used():,}/{cfg.context_tokens:,} tokens")
        if cfg.wall_clock_s:
            parts.append(f"{max(0.0, self._time_left()):.0f} s left")
        urgent = " Submit now if you are done." if left <= 1 else ""
        return f"[budget: {'; '.join(parts)}]{urgent}"
