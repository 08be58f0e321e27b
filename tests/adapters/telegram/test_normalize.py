"""Telegram update (its JSON) -> InboundMessage, as a table. Update shapes follow the Bot API spec."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from adapters.telegram.normalize import BotIdentity, ButtonClick, Malformed, normalize_update
from gateway.messages import ChatKind, InboundMessage, conversation_key, reply_thread
from gateway.outbound.adapter import Decision

BOT = BotIdentity(id=777, username="gateway_bot")
BOT_USER = {"id": 777, "is_bot": True, "first_name": "Gateway", "username": "gateway_bot"}
ADA = {"id": 42, "is_bot": False, "first_name": "Ada", "last_name": "Lovelace", "username": "ada"}
OTHER_BOT = {"id": 99, "is_bot": True, "first_name": "Other", "username": "other_bot"}
PRIVATE = {"id": 42, "type": "private", "first_name": "Ada"}
GROUP = {"id": -100, "type": "group", "title": "Team"}
SUPER = {"id": -1001, "type": "supergroup", "title": "Forum", "is_forum": True}


def u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def message(text: str | None = "hi", chat: dict[str, Any] = PRIVATE, sender: dict[str, Any] | None = ADA,
            **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"message_id": 5, "date": 1_700_000_000, "chat": chat, **extra}
    if sender is not None:
        msg["from"] = sender
    if text is not None:
        msg["text"] = text
    return msg


def mention(text: str, handle: str = "@gateway_bot", kind: str = "mention") -> list[dict[str, Any]]:
    start = text.index(handle)
    return [{"type": kind, "offset": u16(text[:start]), "length": u16(handle)}]


def norm(update: dict[str, Any], **kw: Any) -> InboundMessage | ButtonClick | None:
    return normalize_update({"update_id": 9001, **update}, binding_id="tg", bot=BOT, **kw)


# (name, update, expected fields of the InboundMessage; None = dropped)
CASES: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = [
    ("private chat is a DM", {"message": message("hello")},
     {"chat_kind": ChatKind.DM, "text": "hello", "channel": "42", "mentioned": False, "topic": None,
      "event_id": "9001", "message_id": "5", "workspace": "777"}),
    ("group is a GROUP", {"message": message("hello", GROUP)}, {"chat_kind": ChatKind.GROUP, "channel": "-100"}),
    ("supergroup is a GROUP", {"message": message("x", {"id": -1002, "type": "supergroup", "title": "S"})},
     {"chat_kind": ChatKind.GROUP}),
    ("channel posts are not served", {"channel_post": message("x", {"id": -1003, "type": "channel"}, None)}, None),
    ("mention is stripped", {"message": message("@gateway_bot what time is it?", GROUP,
                                                entities=mention("@gateway_bot what time is it?"))},
     {"mentioned": True, "text": "what time is it?"}),
    ("mention mid-sentence", {"message": message("so @gateway_bot, thoughts?", GROUP,
                                                 entities=mention("so @gateway_bot, thoughts?"))},
     {"mentioned": True, "text": "so, thoughts?"}),
    ("mention after emoji counts UTF-16 units", {"message": message("😀👍 @gateway_bot ping", GROUP,
                                                                   entities=mention("😀👍 @gateway_bot ping"))},
     {"mentioned": True, "text": "😀👍 ping"}),
    ("mention is case-insensitive", {"message": message("@Gateway_Bot hi", GROUP,
                                                        entities=mention("@Gateway_Bot hi", "@Gateway_Bot"))},
     {"mentioned": True, "text": "hi"}),
    ("another user's mention is kept", {"message": message("@ada look", GROUP, entities=mention("@ada look", "@ada"))},
     {"mentioned": False, "text": "@ada look"}),
    ("text_mention of the bot", {"message": message("Gateway help", GROUP, entities=[
        {"type": "text_mention", "offset": 0, "length": 7, "user": BOT_USER}])},
     {"mentioned": True, "text": "help"}),
    ("command addressed to the bot", {"message": message("/ask@gateway_bot why?", GROUP, entities=[
        {"type": "bot_command", "offset": 0, "length": 16}])},
     {"mentioned": True, "text": "/ask why?"}),
    ("command for another bot is dropped", {"message": message("/ask@other_bot why?", GROUP, entities=[
        {"type": "bot_command", "offset": 0, "length": 14}])}, None),
    ("bare command in a group", {"message": message("/start", GROUP, entities=[
        {"type": "bot_command", "offset": 0, "length": 6}])},
     {"mentioned": True, "text": "/start"}),
    ("reply to the bot", {"message": message("and then?", GROUP, reply_to_message=message(
        "earlier answer", GROUP, BOT_USER, message_id=3))},
     {"reply_to_bot": True, "mentioned": False}),
    ("reply to a person", {"message": message("and then?", GROUP, reply_to_message=message(
        "earlier", GROUP, ADA, message_id=3))}, {"reply_to_bot": False}),
    ("forum topic", {"message": message("in topic", SUPER, message_thread_id=12, is_topic_message=True,
                                        reply_to_message=message(None, SUPER, ADA, message_id=12,
                                                                 forum_topic_created={"name": "t", "icon_color": 1}))},
     {"topic": "12", "reply_to_bot": False}),
    ("topic created by the bot is not a reply to it", {"message": message(
        "in topic", SUPER, message_thread_id=12, is_topic_message=True,
        reply_to_message=message(None, SUPER, BOT_USER, message_id=12,
                                 forum_topic_created={"name": "t", "icon_color": 1}))},
     {"topic": "12", "reply_to_bot": False}),
    ("reply to the bot inside a topic", {"message": message(
        "more", SUPER, message_thread_id=12, is_topic_message=True,
        reply_to_message=message("answer", SUPER, BOT_USER, message_id=20, message_thread_id=12))},
     {"topic": "12", "reply_to_bot": True}),
    ("General topic has none", {"message": message("general", SUPER)}, {"topic": None}),
    ("reply thread without a forum is not a topic", {"message": message("x", GROUP, message_thread_id=3)},
     {"topic": None}),
    ("edited message is flagged", {"edited_message": message("fixed", edit_date=1_700_000_100)},
     {"is_edit": True, "text": "fixed"}),
    ("own message dropped", {"message": message("echo", GROUP, BOT_USER)}, None),
    ("other bots dropped", {"message": message("beep", GROUP, OTHER_BOT)}, None),
    ("service message dropped", {"message": message(None, GROUP, new_chat_members=[ADA])}, None),
    ("sticker dropped", {"message": message(None, sticker={
        "file_id": "s", "file_unique_id": "u", "type": "regular", "width": 1, "height": 1,
        "is_animated": False, "is_video": False})}, None),
    ("anonymous sender dropped", {"message": message("x", GROUP, None, sender_chat=GROUP)}, None),
    ("caption with a document", {"message": message(None, caption="see @gateway_bot", caption_entities=mention(
        "see @gateway_bot"), document={"file_id": "f", "file_unique_id": "u", "file_name": "a.pdf",
                                       "mime_type": "application/pdf", "file_size": 10})},
     {"text": "see", "mentioned": True}),
    ("unknown update kind dropped", {"poll_answer": {"poll_id": "p", "option_ids": [0], "user": ADA,
                                                     "option_persistent_ids": ["0"]}}, None),
]


@pytest.mark.parametrize(("name", "update", "expected"), CASES, ids=[c[0] for c in CASES])
def test_normalize(name: str, update: dict[str, Any], expected: dict[str, Any] | None) -> None:
    result = norm(update)
    if expected is None:
        assert result is None
        return
    assert isinstance(result, InboundMessage)
    assert {k: getattr(result, k) for k in expected} == expected


def test_sender_and_attachments() -> None:
    msg = norm({"message": message(None, caption="report", document={
        "file_id": "f", "file_unique_id": "u", "file_name": "a.pdf", "mime_type": "application/pdf",
        "file_size": 10})})
    assert isinstance(msg, InboundMessage)
    assert (msg.sender.account_id, msg.sender.display_name, msg.sender.is_bot) == ("42", "Ada Lovelace", False)
    assert [(a.name, a.mime_type, a.size) for a in msg.attachments] == [("a.pdf", "application/pdf", 10)]


def test_other_bots_kept_when_binding_allows() -> None:
    msg = norm({"message": message("beep", GROUP, OTHER_BOT)}, ignore_bots=False)
    assert isinstance(msg, InboundMessage) and msg.sender.is_bot


def test_topic_is_its_own_conversation_and_reply_target() -> None:
    def in_topic(topic: int | None) -> InboundMessage:
        extra = {"message_thread_id": topic, "is_topic_message": True} if topic else {}
        result = norm({"message": message("x", SUPER, **extra)})
        assert isinstance(result, InboundMessage)
        return result

    a, b, general = in_topic(12), in_topic(13), in_topic(None)
    assert len({conversation_key(a), conversation_key(b), conversation_key(general)}) == 3
    assert (reply_thread(a), reply_thread(general)) == ("12", None)


@pytest.mark.parametrize(("data", "decision", "target"), [
    ("a:AbC123", Decision.APPROVE, "AbC123"),
    ("d:AbC123", Decision.DENY, "AbC123"),
    ("all:card9", Decision.APPROVE_ALL, "card9"),
    ("x:AbC123", None, ""),
    ("a:", None, ""),
    (None, None, ""),
])
def test_button_clicks(data: str | None, decision: Decision | None, target: str) -> None:
    query: dict[str, Any] = {"id": "q1", "from": ADA, "chat_instance": "ci",
                             "message": message("card", GROUP, BOT_USER, message_id=8)}
    if data is not None:
        query["data"] = data
    click = norm({"callback_query": query})
    assert isinstance(click, ButtonClick)
    assert (click.decision, click.target_id, click.query_id) == (decision, target, "q1")
    assert (click.clicker.account_id, click.chat_id, click.message_id) == ("42", "-100", "8")


def test_date_photo_and_voice_are_read_from_the_json() -> None:
    msg = norm({"edited_message": message(None, caption="look", edit_date=1_700_000_100, photo=[
        {"file_id": "small", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 100},
        {"file_id": "large", "file_unique_id": "l", "width": 900, "height": 900, "file_size": 9000}],
        voice={"file_id": "v", "file_unique_id": "v", "duration": 3, "mime_type": "audio/ogg"})})
    assert isinstance(msg, InboundMessage)
    assert msg.received_at == datetime.fromtimestamp(1_700_000_100, timezone.utc)  # the edit's time
    assert [(a.name, a.mime_type, a.size, a.ref) for a in msg.attachments] == [
        ("photo.jpg", "image/jpeg", 9000, "large"), ("voice.ogg", "audio/ogg", None, "v")]


def test_a_click_on_an_inaccessible_message_names_its_chat() -> None:
    query = {"id": "q2", "from": ADA, "chat_instance": "ci", "data": "a:AbC123",
             "message": {"chat": GROUP, "message_id": 8, "date": 0}}
    click = norm({"callback_query": query})
    assert isinstance(click, ButtonClick)
    assert (click.chat_id, click.message_id, click.chat_kind, click.thread_id) == ("-100", "8", ChatKind.GROUP, None)


@pytest.mark.parametrize("update", [
    {"message": {**message("hi"), "message_id": "5"}},
    {"message": {**message("hi"), "chat": "?"}},
    {"message": {**message("hi"), "text": 5}},
    {"message": message("@gateway_bot hi", GROUP, entities=[{"type": "mention", "length": 12}])},
    {"message": message(None, caption="x", photo={"file_id": "p"})},
    {"message": message("hi", GROUP, reply_to_message={"message_id": 3, "from": {"first_name": "X"}})},
    {"callback_query": {"id": "q3", "chat_instance": "ci", "data": "a:x"}},
], ids=["message_id a string", "chat not an object", "text a number", "entity without offset",
        "photo not a list", "reply from a sender without an id", "click without a sender"])
def test_a_field_of_the_wrong_shape_is_malformed(update: dict[str, Any]) -> None:
    with pytest.raises(Malformed):
        norm(update)
