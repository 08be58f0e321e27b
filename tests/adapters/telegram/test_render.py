"""Markdown -> Telegram HTML: a table of cases, and a property: Telegram always accepts it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.telegram.render import escape, html_to_plain, markdown_to_html
from tests.fakes.telegram import parse_html

CASES = [
    ("plain text", "plain text"),
    ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
    ("**bold** and __bold__", "<b>bold</b> and <b>bold</b>"),
    ("*it* and _it_", "<i>it</i> and <i>it</i>"),
    ("~~gone~~ ||secret||", "<s>gone</s> <tg-spoiler>secret</tg-spoiler>"),
    ("**bold _both_**", "<b>bold <i>both</i></b>"),
    ("`a<b>` stays code", "<code>a&lt;b&gt;</code> stays code"),
    ("`**not bold**`", "<code>**not bold**</code>"),
    ("[docs](https://x.org/a?b=1&c=\"2\")", '<a href="https://x.org/a?b=1&amp;c=&quot;2&quot;">docs</a>'),
    ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
    ("# Heading", "<b>Heading</b>"),
    ("- one\n- two\n1. first", "• one\n• two\n1. first"),
    ("> quoted\n> more", "<blockquote>quoted\nmore</blockquote>"),
    ("```js\nlet a = 1 < 2;\n```", '<pre><code class="language-js">let a = 1 &lt; 2;</code></pre>'),
    ("```\nunclosed <fence>", "<pre>unclosed &lt;fence&gt;</pre>"),
    ("```python title=x.py\nx = 1\n```", '<pre><code class="language-python">x = 1</code></pre>'),  # CommonMark's info
    ("```ls -la```\n**done**", "<code>ls -la</code>\n<b>done</b>"),  # one line: code, not a fence
    ("snake_case_name and 2 * 3 * 4", "snake_case_name and 2 * 3 * 4"),
    ("**unbalanced bold", "**unbalanced bold"),
    ("**a *b** c*", "<b>a *b</b> c*"),  # emphasis never interleaves
    ("| a | b |\n|---|---|", "<pre>| a | b |\n|---|---|</pre>"),
]


@pytest.mark.parametrize(("markdown", "expected"), CASES)
def test_markdown_to_telegram_html(markdown: str, expected: str) -> None:
    assert markdown_to_html(markdown) == expected
    parse_html(markdown_to_html(markdown))  # Telegram would accept it


def test_plain_fallback_is_what_a_user_reads() -> None:
    rendered = markdown_to_html("**x** < `y` & [z](https://z.org)")
    assert html_to_plain(rendered) == "x < y & z"
    assert html_to_plain(rendered) == parse_html(rendered)


_markdownish = st.lists(
    st.sampled_from(list("ab *_~`|[]()<>&#->\n:/.\"") + ["https://x.y", "```", "**", "😀"]), max_size=40
).map("".join)


@settings(max_examples=400, deadline=None)
@given(_markdownish)
def test_any_markdown_renders_to_html_telegram_accepts(markdown: str) -> None:
    rendered = markdown_to_html(markdown)
    if rendered.strip():
        visible = parse_html(rendered)  # raises on unbalanced tags or unescaped characters
        assert len(visible) <= len(markdown) + 10 * markdown.count("\n") + 10


@given(st.text(max_size=60))
def test_escape_round_trips(text: str) -> None:
    assert html_to_plain(escape(text)) == text
