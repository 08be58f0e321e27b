"""The model's Markdown as Telegram HTML (parse_mode=HTML), and HTML back to plain text.

Why HTML and not MarkdownV2: HTML needs only `&`, `<`, `>` escaped, so a stray character in
the model's text cannot break a message, and every tag we emit is closed where it opens.
Telegram knows b, i, u, s, code, pre, a, blockquote and tg-spoiler; it has no headings or
lists, so headings become bold lines and list markers become bullets. Everything is rendered
line by line, and inline spans never cross a line, so tags are always balanced and nested
properly (Telegram refuses the message otherwise: 400 "can't parse entities").
"""

from __future__ import annotations

import html
import re

from gateway import markdown as spans

# One pass over a line finds the earliest span; alternatives are tried in this order at a
# position, so code wins over emphasis and `**` wins over `*`. Every span is bounded and linear
# (gateway/markdown.py says why), as Slack's are.
_INLINE = re.compile(
    rf"{spans.CODE}"
    rf"|\[(?P<link_text>{spans.LINK_TEXT})\]\((?P<link_url>{spans.URL})\)"
    rf"|{spans.WEB_AUTOLINK}"
    rf"|\*\*(?P<bold>{spans.emphasis('**')})\*\*"
    rf"|__(?P<bold2>{spans.emphasis('__')})__"
    rf"|~~(?P<strike>{spans.emphasis('~~')})~~"
    rf"|\|\|(?P<spoiler>{spans.emphasis('||')})\|\|"
    rf"|(?<![\w*])\*(?P<italic>{spans.emphasis('*', spans.NOT_SPACE_OR_STAR)})\*(?![\w*])"
    rf"|(?<![\w_])_(?P<italic2>{spans.emphasis('_', spans.NOT_SPACE_OR_UNDERSCORE)})_(?![\w_])"
)
_SAFE_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_TAG = re.compile(r"<[^<>]*>")


def escape(text: str) -> str:
    """Text as Telegram HTML: only &, < and > are special."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _attr(value: str) -> str:
    return escape(value).replace('"', "&quot;")


def markdown_to_html(markdown: str) -> str:
    """Render Markdown (as models write it) to Telegram HTML; never raises. The blocks are read by
    gateway/markdown.py, as for Slack."""
    out: list[str] = []
    for block in spans.blocks(markdown):
        if block.kind == "code":
            out.append(_pre("\n".join(block.lines), block.lang))
        elif block.kind == "table":  # tables keep their columns in a monospace block
            out.append(_pre("\n".join(block.lines), ""))
        elif block.kind == "quote":
            out.append("<blockquote>" + "\n".join(_line(text, in_quote=True) for text in block.lines) + "</blockquote>")
        else:
            out.append(_line(block.lines[0], in_quote=False))
    return "\n".join(out).strip("\n")


def _pre(code: str, lang: str) -> str:
    if not code.strip():
        return ""
    if lang:
        return f'<pre><code class="language-{_attr(lang)}">{escape(code)}</code></pre>'
    return f"<pre>{escape(code)}</pre>"


def _line(line: str, *, in_quote: bool) -> str:
    if h := spans.heading(line):
        return f"<b>{_inline(h[1])}</b>"
    if spans.is_rule(line):
        return "──────────"
    if not in_quote and (item := spans.list_item(line)):
        indent, marker, text = item
        return f"{indent}{'•' if marker in '-*+' else marker} {_inline(text)}"
    return _inline(line)


def _inline(text: str, *, links: bool = True) -> str:
    """Inline spans of one line; each span's content is rendered on its own, so tags nest."""
    out: list[str] = []
    pos = 0
    while (m := _INLINE.search(text, pos)) is not None:
        out.append(escape(text[pos : m.start()]))
        out.append(_span(m, links=links))
        pos = m.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def _span(m: re.Match[str], *, links: bool) -> str:
    groups = m.groupdict()
    if groups["code"] is not None:
        return f"<code>{escape(groups['code'].strip() or groups['code'])}</code>"
    if groups["link_text"] is not None:
        url = groups["link_url"]
        if links and url.lower().startswith(_SAFE_SCHEMES):
            return f'<a href="{_attr(url)}">{_inline(groups["link_text"], links=False)}</a>'
        return escape(m.group(0))  # an unsafe or nested link stays visible as written
    if groups["autolink"] is not None:
        return escape(groups["autolink"])  # Telegram links bare URLs itself
    for name, tag in (("bold", "b"), ("bold2", "b"), ("strike", "s"), ("spoiler", "tg-spoiler"),
                      ("italic", "i"), ("italic2", "i")):
        if groups[name] is not None:
            return f"<{tag}>{_inline(groups[name], links=links)}</{tag}>"
    return escape(m.group(0))  # unreachable: every alternative is named above


def html_to_plain(text: str) -> str:
    """What a user would read: tags dropped, entities decoded (for the plain-text fallback)."""
    return html.unescape(_TAG.sub("", text))
