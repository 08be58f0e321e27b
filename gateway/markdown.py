r"""The model's (or a document's) Markdown, read in time linear in its length.

Every renderer that turns Markdown into a platform's markup (Slack's mrkdwn, Telegram's HTML)
builds its span patterns from here, and the knowledge indexer reads headings here too, so the
bound is one rule, not a copy per renderer that drifts: Slack's `(.+?)` made a 32 KB line of
`**a ` cost 4.6 s on the event loop, and the heading pattern every copy shared,
`#{1,6}\s+(.*?)\s*#*\s*$`, took 160 s over a 4 KB heading of spaces.

Why each pattern is linear: a span's content is at most `MAX_SPAN` characters and never holds
its own opening mark, so the scan that starts at one opening stops at the next one of its
kind. Each character is then read by a bounded number of scans, however the marks are laid out
(tests/test_hostile_inputs.py runs the bad cases). What that costs: emphasis longer than
MAX_SPAN, or nested in its own kind (`**a **b** c**`), stays as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

MAX_SPAN = 300  # characters inside one emphasis or link text
MAX_CODE = 2000  # characters inside one code span
MAX_URL = 2000
MAX_TICKS = 16  # the longest run of backticks that opens a code span


# An italic's first and last character: not a space, and not its own mark.
NOT_SPACE_OR_STAR = r"[^\s*]"
NOT_SPACE_OR_UNDERSCORE = r"[^\s_]"


def emphasis(mark: str, edge: str = r"\S") -> str:
    """The content between two `mark`s: starts and ends with `edge`, never holds `mark`."""
    inner = f"[^{re.escape(mark)}\\n]" if len(mark) == 1 else rf"(?:(?!{re.escape(mark)})[^\n])"
    return rf"{edge}(?:{inner}{{0,{MAX_SPAN}}}?{edge})?"


# A code span: a run of backticks, then anything up to the same run (CommonMark's rule).
CODE = rf"(?P<code_tick>`{{1,{MAX_TICKS}}})(?P<code>[^\n]{{1,{MAX_CODE}}}?)(?P=code_tick)"
# A link's text stops at the next `[` (so `[[[[…` is read once) and its URL at the next `[`, `)`
# or space: `[a](` repeated cannot make each opening scan thousands of characters.
LINK_TEXT = rf"[^\[\]\n]{{1,{MAX_SPAN}}}"
IMAGE_ALT = rf"[^\[\]\n]{{0,{MAX_SPAN}}}"
URL = rf"[^)\[\]\s]{{1,{MAX_URL}}}"
TITLE = rf'(?:\s+"[^"\n]{{0,{MAX_SPAN}}}")?'
AUTOLINK = rf"<(?P<autolink>(?:https?|mailto):[^<>\s]{{1,{MAX_URL}}})>"
WEB_AUTOLINK = rf"<(?P<autolink>https?://[^<>\s]{{1,{MAX_URL}}})>"  # Telegram links the rest itself


def heading(line: str, *, indent: int = 3) -> tuple[int, str] | None:
    """(level, text) of an ATX heading (`## Title ##`), or None; string operations, no pattern.

    Up to `indent` leading spaces, 1-6 `#`, at least one space, then the text with the closing
    `#`s and the spaces around it removed."""
    body = line.lstrip(" ")
    if len(line) - len(body) > indent:
        return None
    level = len(body) - len(body.lstrip("#"))
    rest = body[level:]
    if not 1 <= level <= 6 or not rest[:1].isspace():
        return None
    text = rest.strip()
    return level, text.rstrip("#").rstrip()


# --- blocks: how every renderer reads a reply, line by line --------------------------------
# One reading for Slack's and Telegram's renderers, so a reply is cut into the same code blocks,
# tables, quotes and list items on both and only the markup differs.
#
# A fence follows CommonMark: three or more backticks (with no backtick after them on the line)
# or tildes open it, the first word after them is its language and the rest of the line is
# ignored; only a line of the same character, at least as long, closes it. So a one-line
# ```code``` is inline code, not a fence that swallows the rest of the reply, and ```python
# title opens a block on both platforms (each renderer had its own rule, and each missed one).
FENCE = re.compile(r"^\s*(?P<fence>`{3,}(?=[^`]*$)|~{3,})\s*(?P<lang>[\w+#.-]*).*$")
QUOTE = re.compile(r"^\s{0,3}>\s?(?P<text>.*)$")
RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")
ITEM = re.compile(r"^(?P<indent>\s*)(?P<marker>[-*+]|\d{1,9}[.)])\s+(?P<text>.*)$")


@dataclass(frozen=True, slots=True)
class Block:
    """A run of lines read as one thing. `lines`: the code of a fence (`lang` its language), the rows
    of a table as written, the quoted text of each line of a quote, or the one line of a "line"."""

    kind: Literal["code", "table", "quote", "line"]
    lines: tuple[str, ...]
    lang: str = ""


def blocks(markdown: str) -> Iterator[Block]:
    """The reply's blocks in order; an unclosed fence runs to the end (it still renders)."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if fence := FENCE.match(line):
            mark = fence.group("fence")
            start = i = i + 1
            while i < len(lines) and not _closes(lines[i], mark):
                i += 1
            yield Block("code", tuple(lines[start:i]), fence.group("lang"))
            i += 1  # the closing fence
            continue
        if TABLE_ROW.match(line):
            end = _run_of(lines, i, TABLE_ROW)
            yield Block("table", tuple(lines[i:end]))
        elif QUOTE.match(line):
            end = _run_of(lines, i, QUOTE)
            yield Block("quote", tuple(QUOTE.sub(r"\g<text>", q) for q in lines[i:end]))
        else:
            end = i + 1
            yield Block("line", (line,))
        i = end


def _run_of(lines: list[str], i: int, pattern: re.Pattern[str]) -> int:
    """Where the run of lines matching `pattern` that starts at `i` ends."""
    while i < len(lines) and pattern.match(lines[i]):
        i += 1
    return i


def _closes(line: str, mark: str) -> bool:
    stripped = line.strip()
    return len(stripped) >= len(mark) and set(stripped) == {mark[0]}


def list_item(line: str) -> tuple[str, str, str] | None:
    """(indent, marker, text) of a bulleted (`-`, `*`, `+`) or numbered (`1.`, `1)`) item, or None."""
    m = ITEM.match(line)
    return (m.group("indent"), m.group("marker"), m.group("text")) if m else None


def is_rule(line: str) -> bool:
    """A thematic break: three or more `-`, `*` or `_`, spaces allowed between."""
    return RULE.match(line) is not None
