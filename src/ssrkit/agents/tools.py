"""The agent's tool-call protocol: the tools, what a reply must look like, and how edits apply (SPEC §5).

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

import re
from dataclasses import dataclass, field

TOOLS = ("bash", "edit", "create", "submit")


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
