"""A long reply that is mostly one code block stays code in every message it is split into, on
each platform's own renderer and message limit, and the text after the block is never code."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from adapters.mattermost.adapter import MAX_MESSAGE_CHARS as MATTERMOST_LIMIT
from adapters.slack.adapter import SLACK_LIMITS
from adapters.slack.render import markdown_to_mrkdwn
from adapters.telegram.render import markdown_to_html
from gateway.clock import ManualClock
from gateway.messages import ChatKind
from gateway.outbound.adapter import PlatformLimits, ReplyTarget
from gateway.outbound.delivery import ReplyStream, split_paragraphs
from gateway.store.repo import Store

from ..test_delivery import store  # noqa: F401 (a fixture: one migrated SQLite store)

AFTER = "That is the whole script; run it with python."


class Chat:
    """What a person in the thread sees: the final text of each message, as the platform shows it."""

    platform = "fake"

    def __init__(self, render: Callable[[str], str], limit: int) -> None:
        self.render = render
        self.limits = PlatformLimits(max_message_chars=limit, min_edit_interval=1.0, first_draft_after=0.0)
        self.messages: dict[str, str] = {}

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        message_id = f"m{len(self.messages) + 1}"
        self.messages[message_id] = text
        return message_id

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        self.messages[message_id] = text

    def forget(self, message_ids: object) -> None:
        """Keeps nothing between replies."""


def _slack_code(message: str) -> tuple[str, str]:
    """(the code shown, the text outside code) of a Slack mrkdwn message."""
    code = "".join(re.findall(r"```\n?(.*?)```", message, flags=re.S))
    return code, re.sub(r"```.*?```", "", message, flags=re.S)


def _telegram_code(message: str) -> tuple[str, str]:
    code = "".join(re.findall(r"<pre>(?:<code[^>]*>)?(.*?)(?:</code>)?</pre>", message, flags=re.S))
    return code, re.sub(r"<pre>.*?</pre>", "", message, flags=re.S)


def _commonmark_code(message: str) -> tuple[str, str]:
    code = "".join(re.findall(r"```[\w+-]*\n(.*?)\n```", message, flags=re.S))
    return code, re.sub(r"```[\w+-]*\n.*?\n```", "", message, flags=re.S)


PLATFORMS = {
    "slack": (markdown_to_mrkdwn, SLACK_LIMITS.max_message_chars, _slack_code),
    "telegram": (markdown_to_html, 4096, _telegram_code),
    "mattermost": (lambda markdown: markdown, MATTERMOST_LIMIT, _commonmark_code),
}


@pytest.mark.parametrize("platform", sorted(PLATFORMS))
async def test_a_300_line_code_block_is_code_in_every_part(platform: str, store: Store) -> None:
    render, limit, code_of = PLATFORMS[platform]
    width = limit // 110  # 300 lines come to about three messages on this platform
    lines = [f"row_{i:03} = compute({i})  # " + "x" * width for i in range(300)]
    answer = "Here is the script:\n\n```python\n" + "\n".join(lines) + "\n```\n\n" + AFTER
    chat = Chat(render, limit)
    stream = ReplyStream(chat, ReplyTarget("fake", "b", "w", "C1", "T1", ChatKind.CHANNEL), store, "run1",  # type: ignore[arg-type]
                         ManualClock(), fresh=True)
    await stream.append(answer)
    await stream.finish()

    messages = list(chat.messages.values())
    assert len(messages) >= 3, f"expected the block split over three messages, got {len(messages)}"
    assert all(len(m) <= limit for m in messages)
    shown_code = ""
    for n, message in enumerate(messages):
        code, outside = code_of(message)
        assert code.strip(), f"part {n + 1} of {len(messages)} shows no code"
        assert "row_" not in outside, f"part {n + 1}: code lines shown as plain text"
        shown_code += code
    for line in lines:
        assert line in shown_code, f"{line[:8]} is not shown as code"
    last_code, last_outside = code_of(messages[-1])
    assert AFTER in last_outside and AFTER not in last_code, "the text after the block became code"


@pytest.mark.parametrize(
    ("text", "limit"),
    [
        ("```\n" + "a line\n" * 60 + "```\nafter", 100),  # a fence with no language
        ("~~~sh\n" + "echo hi\n" * 60 + "~~~\n\nafter", 100),  # tildes
        ("````md\n```\ninner\n```\n" + "text line\n" * 40 + "````\nafter", 80),  # a longer fence holds a shorter one
    ],
)
def test_every_piece_opens_and_closes_its_fence(text: str, limit: int) -> None:
    pieces = split_paragraphs(text, limit)
    assert len(pieces) > 1
    assert all(len(p) <= limit for p in pieces)
    marker = text.split("\n", 1)[0].rstrip("abcdefghijklmnopqrstuvwxyz")
    for piece in pieces[:-1]:
        assert piece.startswith(marker) and piece.endswith("\n" + marker), piece
    assert pieces[-1].startswith(marker) and pieces[-1].endswith("after")
