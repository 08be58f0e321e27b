"""The model's Markdown as Slack mrkdwn. Pure: text in, text out.

Slack's mrkdwn is not Markdown: bold is `*x*`, italics `_x_`, strike `~x~`, links
`<url|label>`, no headings, no tables, and `&`, `<`, `>` must be escaped or Slack reads
them as markup. Code (fenced and inline) passes through untouched apart from that escaping.
"""

from __future__ import annotations

import re

from gateway import markdown as spans

_TASK_BOX = re.compile(r"^\[([ xX])\]\s+(.*)$")

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
    """The reply's blocks (gateway/markdown.py reads them, as for Telegram) in Slack's markup."""
    out: list[str] = []
    for block in spans.blocks(markdown):
        if block.kind == "code":
            out.append("```\n" + escape("\n".join(block.lines)) + "\n```")
        elif block.kind == "table":
            # Slack has no tables; a code block keeps the columns aligned and readable.
            out.append("```\n" + escape("\n".join(row.strip() for row in block.lines)) + "\n```")
        elif block.kind == "quote":
            out.extend(f"> {_inline(text)}" if text else ">" for text in block.lines)
        else:
            out.append(_line(block.lines[0]))
    return "\n".join(out)


def _line(line: str) -> str:
    if spans.is_rule(line):
        return "―――"
    if h := spans.heading(line):
        # A heading is a bold line; markers inside would nest `*` and break the bold.
        return f"*{_inline(h[1], plain=True)}*" if h[1] else ""
    if item := spans.list_item(line):
        indent, marker, text = item
        if marker in "-*+":
            box = _TASK_BOX.match(text)
            bullet = "•" if box is None else "☐" if box.group(1) == " " else "☑"
            return f"{_indent(indent)}{bullet} {_inline(box.group(2) if box else text)}"
        return f"{_indent(indent)}{marker[:-1]}. {_inline(text)}"
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
