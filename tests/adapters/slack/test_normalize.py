"""Slack event bodies → InboundMessage, as a table. Shapes follow Slack's published payloads
(bolt-python tests/scenario_tests: message, app_mention, file_share, message_changed, ...)."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.slack.normalize import BotIdentity, chat_kind, normalize_event, plain_text
from gateway.messages import ChatKind, conversation_key, reply_thread

BOT = BotIdentity(user_id="U0BOT", bot_id="B0BOT")


def body(event: dict[str, Any], event_id: str = "Ev0001") -> dict[str, Any]:
    return {
        "token": "verification-token",
        "team_id": "T111",
        "api_app_id": "A111",
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1610241741,
        "authorizations": [{"enterprise_id": None, "team_id": "T111", "user_id": "U0BOT", "is_bot": True}],
    }


def message(**fields: Any) -> dict[str, Any]:
    event = {
        "client_msg_id": "f0582a78-72db-4feb-b2f3-1e47d66365c8",
        "type": "message",
        "text": "hello",
        "user": "U222",
        "ts": "1610241741.000200",
        "team": "T111",
        "channel": "C111",
        "event_ts": "1610241741.000200",
        "channel_type": "channel",
    }
    event.update(fields)
    return {k: v for k, v in event.items() if v is not None}


def normalize(event: dict[str, Any], **kw: Any):
    return normalize_event(body(event), binding_id="b1", bot=BOT, **kw)


# (case, event, expected fields of the InboundMessage, or None for "dropped")
TABLE: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("channel message", message(), {"chat_kind": ChatKind.CHANNEL, "text": "hello", "mentioned": False, "thread": None}),
    (
        "channel mention (message event)",
        message(text="<@U0BOT> what's up?"),
        {"mentioned": True, "text": "what's up?", "dedupe_key": "C111:1610241741.000200"},
    ),
    (
        "app_mention (no channel_type)",
        {k: v for k, v in message(type="app_mention", text="<@U0BOT> hi").items() if k != "channel_type"},
        {"mentioned": True, "text": "hi", "chat_kind": ChatKind.CHANNEL, "dedupe_key": "C111:1610241741.000200"},
    ),
    ("mention with label", message(text="hey <@U0BOT|agent>, help"), {"mentioned": True, "text": "hey , help"}),
    ("other user's mention kept", message(text="ask <@U333>"), {"mentioned": False, "text": "ask <@U333>"}),
    ("a longer id is not our mention", message(text="<@U0BOTX> hi"), {"mentioned": False}),
    ("dm", message(channel="D111", channel_type="im"), {"chat_kind": ChatKind.DM, "channel": "D111"}),
    ("group dm", message(channel="G111", channel_type="mpim"), {"chat_kind": ChatKind.GROUP}),
    ("private channel", message(channel="G222", channel_type="group"), {"chat_kind": ChatKind.CHANNEL}),
    (
        "thread reply under the bot",
        message(thread_ts="1610241700.000100", parent_user_id="U0BOT"),
        {"thread": "1610241700.000100", "reply_to_bot": True},
    ),
    (
        "thread reply under a person",
        message(thread_ts="1610241700.000100", parent_user_id="U333"),
        {"thread": "1610241700.000100", "reply_to_bot": False},
    ),
    ("thread broadcast", message(subtype="thread_broadcast", thread_ts="1610241700.000100"), {"thread": "1610241700.000100"}),
    ("thread parent (thread_ts == ts)", message(thread_ts="1610241741.000200"), {"thread": None}),
    (
        "links and escapes undone",
        message(text="see <https://x.test/a|the page> &amp; <#C999|general> &lt;3 <!here>"),
        {"text": "see the page (https://x.test/a) & #general <3 @here"},
    ),
    (
        "sender and ids",
        message(),
        {"sender.account_id": "U222", "sender.is_bot": False, "event_id": "Ev0001", "message_id": "1610241741.000200", "workspace": "T111"},
    ),
    ("own message echoed (user)", message(user="U0BOT", bot_id="B0BOT"), None),
    ("own message echoed (bot id only)", message(user=None, bot_id="B0BOT", subtype="bot_message"), None),
    ("other bot, not admitted", message(user="U777", bot_id="B777"), None),
    ("classic bot message, not admitted", message(user=None, bot_id="B777", subtype="bot_message"), None),
    ("message_deleted", message(subtype="message_deleted", hidden=True, user=None), None),
    ("channel_join", message(subtype="channel_join", text="<@U222> has joined the channel"), None),
    ("channel_topic", message(subtype="channel_topic"), None),
    ("hidden", message(hidden=True), None),
    ("other event type", {"type": "reaction_added", "user": "U222", "reaction": "thumbsup", "item": {}}, None),
    ("empty text is still a message", message(text=""), {"text": ""}),
]


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize(("event", "expected"), [(e, x) for _, e, x in TABLE], ids=[c[0] for c in TABLE])
def test_normalize_table(event: dict[str, Any], expected: dict[str, Any] | None) -> None:
    msg = normalize(event)
    if expected is None:
        assert msg is None
        return
    assert msg is not None
    for name, value in expected.items():
        assert _get(msg, name) == value, name


def test_mention_pair_shares_dedupe_key_but_not_event_id() -> None:
    as_message = normalize_event(body(message(text="<@U0BOT> hi"), "EvA"), binding_id="b1", bot=BOT)
    mention_event = {k: v for k, v in message(type="app_mention", text="<@U0BOT> hi").items() if k != "channel_type"}
    as_mention = normalize_event(body(mention_event, "EvB"), binding_id="b1", bot=BOT)
    assert as_message and as_mention
    assert as_message.event_id != as_mention.event_id
    assert as_message.dedupe_key == as_mention.dedupe_key
    # Same conversation and same reply thread: whichever arrives first is the one that runs.
    assert conversation_key(as_message) == conversation_key(as_mention)
    assert reply_thread(as_message) == "1610241741.000200"


def test_top_level_dm_messages_share_one_conversation() -> None:
    a = normalize(message(channel="D111", channel_type="im", ts="1.1"))
    b = normalize(message(channel="D111", channel_type="im", ts="2.2"))
    t = normalize(message(channel="D111", channel_type="im", ts="3.3", thread_ts="1.1"))
    assert a and b and t
    assert conversation_key(a) == conversation_key(b) != conversation_key(t)
    assert reply_thread(a) is None


def test_files_are_named() -> None:
    files = [
        {"id": "F111", "name": "file.png", "title": "file.png", "mimetype": "image/png", "size": 92582, "permalink": "https://x.slack.com/files/U111/F111/file.png"},
        {"id": "F222", "mimetype": "text/plain"},
    ]
    msg = normalize(message(subtype="file_share", files=files))
    assert msg is not None
    assert [(a.name, a.mime_type, a.size) for a in msg.attachments] == [("file.png", "image/png", 92582), ("F222", "text/plain", None)]
    assert msg.attachments[0].url == "https://x.slack.com/files/U111/F111/file.png"


def test_other_bots_when_admitted() -> None:
    msg = normalize(message(user="U777", bot_id="B777", username="deploybot"), admit_bots=True)
    assert msg is not None and msg.sender.is_bot and msg.sender.display_name == "deploybot"
    classic = normalize(message(user=None, bot_id="B777", subtype="bot_message"), admit_bots=True)
    assert classic is not None and classic.sender.account_id == "B777"
    own = normalize(message(user="U0BOT", bot_id="B0BOT"), admit_bots=True)
    assert own is None


def _changed(inner: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "message",
        "subtype": "message_changed",
        "message": inner,
        "previous_message": {"type": "message", "text": "original", "user": "U222", "ts": "1665102338.901939"},
        "channel": "C111",
        "hidden": True,
        "ts": "1665102362.013600",
        "event_ts": "1665102362.013600",
        "channel_type": "channel",
    }


def test_edits_dropped_by_default_and_flagged_when_wanted() -> None:
    edited = _changed({"type": "message", "text": "<@U0BOT> updated", "user": "U222", "ts": "1665102338.901939", "edited": {"user": "U222", "ts": "1665102362.000000"}})
    assert normalize(edited) is None
    msg = normalize(edited, include_edits=True)
    assert msg is not None
    assert msg.is_edit and msg.text == "updated" and msg.message_id == "1665102338.901939" and msg.mentioned
    assert msg.dedupe_key == "C111:1665102338.901939:edit:1665102362.000000"


def test_message_changed_without_edit_stamp_is_not_an_edit() -> None:
    # Slack sends message_changed when a reply lands in a thread or a link unfurls.
    unfurl = _changed({"type": "message", "text": "same", "user": "U222", "ts": "1665102338.901939"})
    assert normalize(unfurl, include_edits=True) is None


@pytest.mark.parametrize(
    ("channel_type", "channel", "kind"),
    [("im", "D1", ChatKind.DM), ("mpim", "G1", ChatKind.GROUP), ("channel", "C1", ChatKind.CHANNEL), ("group", "G1", ChatKind.CHANNEL),
     (None, "D1", ChatKind.DM), (None, "C1", ChatKind.CHANNEL), (None, "G1", None)],
)
def test_chat_kind(channel_type: str | None, channel: str, kind: ChatKind | None) -> None:
    assert chat_kind(channel_type, channel) is kind


@pytest.mark.parametrize(
    "bad",
    [
        {"type": "message", "text": "no channel", "user": "U1", "ts": "1.1"},
        {"type": "message", "channel": "C1", "user": "U1", "text": "no ts", "channel_type": "channel"},
        {"type": "app_mention", "channel": "G1", "user": "U1", "text": "x", "ts": "1.1"},  # kind unknown: the adapter asks
    ],
)
def test_malformed_raises_for_the_caller_to_drop(bad: dict[str, Any]) -> None:
    with pytest.raises((KeyError, TypeError, ValueError)):
        normalize(bad)


def test_missing_event_id_raises() -> None:
    b = body(message())
    del b["event_id"]
    with pytest.raises(KeyError):
        normalize_event(b, binding_id="b1", bot=BOT)


def test_plain_text_strips_only_the_bot() -> None:
    assert plain_text("<@U0BOT>   summarize   this <@U1>", "U0BOT") == "summarize this <@U1>"
