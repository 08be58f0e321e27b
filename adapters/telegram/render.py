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

_FENCE = re.compile(r"^\s*(?P<fence>`{3,}|~{3,})\s*(?P<lang>[\w+#.-]*)\s*$")
_QUOTE = re.compile(r"^\s{0,3}>\s?(?P<text>.*)$")
_ITEM = re.compile(r"^(?P<indent>\s*)(?P<marker>[-*+]|\d{1,9}[.)])\s+(?P<text>.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_TABLE = re.compile(r"^\s*\|.*\|\s*$")

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
    """Render Markdown (as models write it) to Telegram HTML; never raises."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            body, i = _take_fence(lines, i + 1, fence.group("fence"))
            out.append(_pre(body, fence.group("lang")))
            continue
        if _TABLE.match(line):  # tables keep their columns in a monospace block
            start = i
            while i < len(lines) and _TABLE.match(lines[i]):
                i += 1
            out.append(_pre("\n".join(lines[start:i]), ""))
            continue
        if _QUOTE.match(line):
            quoted: list[str] = []
            while i < len(lines) and (m := _QUOTE.match(lines[i])):
                quoted.append(_line(m.group("text"), in_quote=True))
                i += 1
            out.append("<blockquote>" + "\n".join(quoted) + "</blockquote>")
            continue
        out.append(_line(line, in_quote=False))
        i += 1
    return "\n".join(out).strip("\n")


def _take_fence(lines: list[str], i: int, fence: str) -> tuple[str, int]:
    """The code up to the closing fence (or the end: an unclosed fence still renders)."""
    body: list[str] = []
    while i < len(lines):
        stripped = lines[i].strip()
        if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
            return "\n".join(body), i + 1
        body.append(lines[i])
        i += 1
    return "\n".join(body), i


def _pre(code: str, lang: str) -> str:
    if not code.strip():
        return ""
    if lang:
        return f'<pre><code class="language-{_attr(lang)}">{escape(code)}</code></pre>'
    return f"<pre>{escape(code)}</pre>"


def _line(line: str, *, in_quote: bool) -> str:
    if h := spans.heading(line):
        return f"<b>{_inline(h[1])}</b>"
    if _RULE.match(line):
        return "──────────"
    if not in_quote and (m := _ITEM.match(line)):
        marker = m.group("marker")
        bullet = "•" if marker in "-*+" else marker
        return f"{m.group('indent')}{bullet} {_inline(m.group('text'))}"
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
