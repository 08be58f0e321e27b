"""Markdown → Slack mrkdwn, as a table: what the model writes, what Slack must receive."""

import pytest

from adapters.slack.render import markdown_to_mrkdwn

CASES = [
    ("plain", "Hello there", "Hello there"),
    ("bold stars", "a **bold** move", "a *bold* move"),
    ("bold underscores", "a __bold__ move", "a *bold* move"),
    ("italic star", "an *italic* word", "an _italic_ word"),
    ("italic underscore stays", "an _italic_ word", "an _italic_ word"),
    ("bold and italic", "**bold** and *it*", "*bold* and _it_"),
    ("strike", "~~gone~~", "~gone~"),
    ("inline code untouched", "run `a **b** <c>`", "run `a **b** &lt;c&gt;`"),
    ("link", "see [the docs](https://example.com/a?b=1&c=2)", "see <https://example.com/a?b=1&amp;c=2|the docs>"),
    ("link label with pipe", "[a|b](https://x.test)", "<https://x.test|a¦b>"),
    ("link label markup stripped", "[**docs**](https://x.test)", "<https://x.test|docs>"),
    ("bold around link", "**see [docs](https://x.test)**", "*see <https://x.test|docs>*"),
    ("autolink", "<https://x.test/p>", "<https://x.test/p>"),
    ("image", "![chart](https://x.test/c.png)", "<https://x.test/c.png|chart>"),
    ("escapes", "a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
    ("no fake mentions", "<@U123> <!channel>", "&lt;@U123&gt; &lt;!channel&gt;"),
    ("heading", "# Title", "*Title*"),
    ("heading with markup", "## The **big** one ##", "*The big one*"),
    ("bullets", "- one\n* two\n+ three", "• one\n• two\n• three"),
    ("nested bullets", "- one\n  - sub", "• one\n    • sub"),
    ("task list", "- [ ] todo\n- [x] done", "☐ todo\n☑ done"),
    ("ordered", "1. first\n2) second", "1. first\n2. second"),
    ("quote", "> wise words", "> wise words"),
    ("rule", "---", "―――"),
    ("multiplication is not italics", "2 * 3 * 4", "2 * 3 * 4"),
    ("snake_case untouched", "use my_var_name", "use my_var_name"),
    ("paragraphs kept", "one\n\ntwo", "one\n\ntwo"),
]


@pytest.mark.parametrize(("markdown", "expected"), [(m, e) for _, m, e in CASES], ids=[c[0] for c in CASES])
def test_markdown_to_mrkdwn(markdown: str, expected: str) -> None:
    assert markdown_to_mrkdwn(markdown) == expected


def test_fenced_code_keeps_content_and_drops_language() -> None:
    md = "Before\n```python\nif a < b and **x**:\n    pass\n```\nAfter **b**"
    assert markdown_to_mrkdwn(md) == "Before\n```\nif a &lt; b and **x**:\n    pass\n```\nAfter *b*"


def test_unclosed_fence_still_a_code_block() -> None:
    assert markdown_to_mrkdwn("```\ncode *x*") == "```\ncode *x*\n```"


def test_fences_are_read_as_for_telegram() -> None:
    """The block rules are gateway/markdown.py's, shared with Telegram: a one-line ```code``` is inline code
    (it used to open a fence that swallowed the rest of the reply), and only a bare fence line closes one."""
    assert markdown_to_mrkdwn("```ls -la```\n**done**") == "`ls -la`\n*done*"
    assert markdown_to_mrkdwn("```\ncode\n```python\nstill code\n```\n**b**") == \
        "```\ncode\n```python\nstill code\n```\n*b*"
    assert markdown_to_mrkdwn("~~~ text\n- x\n~~~") == "```\n- x\n```"


def test_table_becomes_code_block() -> None:
    md = "| a | b |\n|---|---|\n| 1 | 2 |\n\nafter"
    assert markdown_to_mrkdwn(md) == "```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n\nafter"
