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
