"""The conversation key, one pure function, checked as a table of every platform's rules."""

from __future__ import annotations

import pytest

from gateway.messages import ChatKind, InboundMessage, Sender, conversation_key, reply_thread


def msg(platform: str, kind: ChatKind, channel: str = "C1", thread: str | None = None, topic: str | None = None,
        message_id: str = "M1") -> InboundMessage:
    return InboundMessage(platform=platform, binding_id="b", workspace="T1", channel=channel, chat_kind=kind,
                          sender=Sender("U1"), text="hi", event_id="e", message_id=message_id, thread=thread, topic=topic)


@pytest.mark.parametrize(
    ("message", "key", "replies_in"),
    [
        # Slack: a top-level mention in a channel starts a thread anchored on itself.
        (msg("slack", ChatKind.CHANNEL, message_id="1700.1"), "slack:T1:C1:1700.1", "1700.1"),
        # ...and a reply in that thread is the same conversation.
        (msg("slack", ChatKind.CHANNEL, thread="1700.1", message_id="1700.9"), "slack:T1:C1:1700.1", "1700.1"),
        (msg("slack", ChatKind.GROUP, message_id="5.5"), "slack:T1:C1:5.5", "5.5"),
        # A DM's top-level messages are one conversation; a thread inside a DM is its own.
        (msg("slack", ChatKind.DM, channel="D1", message_id="1.1"), "slack:T1:D1", None),
        (msg("slack", ChatKind.DM, channel="D1", message_id="1.2"), "slack:T1:D1", None),
        (msg("slack", ChatKind.DM, channel="D1", thread="1.1"), "slack:T1:D1:1.1", "1.1"),
        # Mattermost: root_id threads, same rules.
        (msg("mattermost", ChatKind.CHANNEL, message_id="p1"), "mattermost:T1:C1:p1", "p1"),
        (msg("mattermost", ChatKind.CHANNEL, thread="p1", message_id="p2"), "mattermost:T1:C1:p1", "p1"),
        (msg("mattermost", ChatKind.DM, channel="D9"), "mattermost:T1:D9", None),
        # Telegram: the chat, plus the forum topic; General has none.
        (msg("telegram", ChatKind.GROUP, channel="-100"), "telegram:T1:-100", None),
        (msg("telegram", ChatKind.GROUP, channel="-100", topic="42"), "telegram:T1:-100:topic:42", "42"),
        (msg("telegram", ChatKind.DM, channel="77"), "telegram:T1:77", None),
        # The web chat: the conversation is the channel.
        (msg("web", ChatKind.DM, channel="abc"), "web:T1:abc", None),
    ],
)
def test_conversation_key(message: InboundMessage, key: str, replies_in: str | None) -> None:
    assert conversation_key(message) == key
    assert reply_thread(message) == replies_in


def test_different_threads_are_different_conversations() -> None:
    a = msg("slack", ChatKind.CHANNEL, thread="1.1")
    b = msg("slack", ChatKind.CHANNEL, thread="2.2")
    c = msg("slack", ChatKind.CHANNEL, channel="C2", thread="1.1")
    assert len({conversation_key(a), conversation_key(b), conversation_key(c)}) == 3
