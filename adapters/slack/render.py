"""The model's Markdown as Slack mrkdwn. Pure: text in, text out.

Slack's mrkdwn is not Markdown: bold is `*x*`, italics `_x_`, strike `~x~`, links
`<url|label>`, no headings, no tables, and `&`, `<`, `>` must be escaped or Slack reads
them as markup. Code (fenced and inline) passes through untouched apart from that escaping.
"""

from __future__ import annotations

import re

from gateway import markdown as spans

_FENCE = re.compile(r"^(\s*)(```|~~~)")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(?:\[([ xX])\]\s+)?(.*)$")
_ORDERED = re.compile(r"^(\s*)(\d+)[.)]\s+(.*)$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_TABLE_ROW = re.compile(r"^\s*\|.*\|\s*$")

# Inline tokens kept out of escaping and emphasis: code spans, images, links, autolinks. Every
# span is bounded and linear (gateway/markdown.py says why), as Telegram's are.
_INLINE = re.compile(
    rf"{spans.CODE}"
    rf"|!\[(?P<img_alt>{spans.IMAGE_ALT})\]\((?P<img_url>{spans.URL}){spans.TITLE}\)"
    rf"|\[(?P<link_text>{spans.LINK_TEXT})\]\((?P<link_url>{spans.URL}){spans.TITLE}\)"
    rf"|{spans.AUTOLINK}"
)
_BOLD = re.compile(rf"\*\*({spans.emphasis('**')})\*\*|__({spans.emphasis('__')})__")
_ITALIC_STAR = re.compile(rf"(?<![\w*])\*({spans.emphasis('*', spans.NOT_SPACE_OR_STAR)})\*(?![\w*])")
_ITALIC_UNDER = re.compile(rf"(?<![\w_])_({spans.emphasis('_', spans.NOT_SPACE_OR_UNDERSCORE)})_(?![\w_])")
_STRIKE = re.compile(rf"~~({spans.emphasis('~~')})~~")
_BOLD_MARK = "\x02"  # stands for `*` until italics are done, so `**x**` is not read as italics
_SLOT = "\x01"


def escape(text: str) -> str:
    """Slack's three control characters; everything else is literal."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_to_mrkdwn(markdown: str) -> str:
    out: list[str] = []
    lines = markdown.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            marker = fence.group(2)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end of an unclosed block)
            out.append("```\n" + escape("\n".join(body)) + "\n```")
            continue
        if _TABLE_ROW.match(line):
            # Slack has no tables; a code block keeps the columns aligned and readable.
            rows: list[str] = []
            while i < len(lines) and _TABLE_ROW.match(lines[i]):
                rows.append(lines[i].strip())
                i += 1
            out.append("```\n" + escape("\n".join(rows)) + "\n```")
            continue
        out.append(_line(line))
        i += 1
    return "\n".join(out)


def _line(line: str) -> str:
    if _RULE.match(line):
        return "―――"
    if h := spans.heading(line):
        # A heading is a bold line; markers inside would nest `*` and break the bold.
        return f"*{_inline(h[1], plain=True)}*" if h[1] else ""
    if m := _BULLET.match(line):
        indent, box, text = m.groups()
        bullet = {None: "•", " ": "☐", "x": "☑", "X": "☑"}[box]
        return f"{_indent(indent)}{bullet} {_inline(text)}"
    if m := _ORDERED.match(line):
        indent, number, text = m.groups()
        return f"{_indent(indent)}{number}. {_inline(text)}"
    if m := _QUOTE.match(line):
        return f">{_inline(m.group(1))}" if not m.group(1) else f"> {_inline(m.group(1))}"
    return _inline(line)


def _indent(whitespace: str) -> str:
    # Nested list items: Markdown uses 2-4 spaces per level; Slack shows leading spaces as is.
    level = len(whitespace.expandtabs(4)) // 2
    return "    " * level


def _inline(text: str, *, plain: bool = False) -> str:
    slots: list[str] = []

    def keep(m: re.Match[str]) -> str:
        if m.group("code"):
            slots.append("`" + escape(m.group("code").strip()) + "`")
        elif m.group("img_url"):
            slots.append(_link(m.group("img_url"), m.group("img_alt") or m.group("img_url")))
        elif m.group("link_url"):
            slots.append(_link(m.group("link_url"), _strip_marks(m.group("link_text"))))
        else:
            slots.append(f"<{escape(m.group('autolink'))}>")
        return f"{_SLOT}{len(slots) - 1}{_SLOT}"

    text = escape(_INLINE.sub(keep, text))
    if plain:
        text = _strip_marks(text)
    else:
        text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(1) or m.group(2)}{_BOLD_MARK}", text)
        text = _ITALIC_STAR.sub(r"_\1_", text)
        text = _STRIKE.sub(r"~\1~", text)
        text = text.replace(_BOLD_MARK, "*")
    return re.sub(f"{_SLOT}(\\d+){_SLOT}", lambda m: slots[int(m.group(1))], text)


def _link(url: str, label: str) -> str:
    # `|` and `>` end a Slack link's label early; the URL must stay as written.
    label = escape(label).replace("|", "¦")
    url = url.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
    return f"<{url}|{label}>" if label and label != url else f"<{url}>"


def _strip_marks(text: str) -> str:
    text = _BOLD.sub(lambda m: m.group(1) or m.group(2), text)
    text = _ITALIC_STAR.sub(r"\1", text)
    text = _ITALIC_UNDER.sub(r"\1", text)
    return _STRIKE.sub(r"\1", text)
