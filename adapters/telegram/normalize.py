"""A Telegram update (its JSON) as the gateway's `InboundMessage` (or a button click). Pure: no I/O.

Read from the update's JSON, not from python-telegram-bot's `Update`: `Update.de_json` builds every
one of a message's ~100 attributes and its nested objects (~490 function calls, 0.27 ms of CPU per
update on the 2-core machine) for the fifteen fields read here (16 µs). A field read here that is
missing or of the wrong type raises `Malformed`, and the adapter drops the update, as it dropped
one `de_json` could not parse.

Facts reported here that the core cannot see for itself:
- chat kind: a private chat is a DM; a group or supergroup is a GROUP; channels are not served;
- `mentioned`: an `@botname` mention entity (offsets count UTF-16 code units, as Telegram
  does), a `text_mention` of the bot, or a command: `/cmd@botname`, or a bare `/cmd` (Telegram
  delivers a bare command in a group only to the bot it is meant for in privacy mode);
- `reply_to_bot`: a reply to one of the bot's messages. In a forum, every message in a topic
  "replies" to the topic's creation message; that is not a reply to the bot;
- `topic`: the forum topic (`message_thread_id` with `is_topic_message`); General has none.
The bot's mention is removed from the text; a command keeps its name without `@botname`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

from gateway.messages import Attachment, ChatKind, InboundMessage, Sender
from gateway.outbound.adapter import Decision

from .cards import parse_callback_data, parse_memory_data, parse_show_data
from .questions import parse_question_data
from .stop import parse_stop

PLATFORM = "telegram"
_CHAT_KINDS = {"private": ChatKind.DM, "group": ChatKind.GROUP, "supergroup": ChatKind.GROUP}
# Entity types (core.telegram.org/bots/api#messageentity) that address the bot.
MENTION, TEXT_MENTION, BOT_COMMAND = "mention", "text_mention", "bot_command"
JSON = dict[str, Any]


class Malformed(ValueError):
    """A field the gateway reads is missing or not of its Bot API type."""


class Entity(NamedTuple):
    """One of a message's entities (offsets in UTF-16 code units, as Telegram counts) and its text."""

    kind: str | None
    offset: int
    length: int
    user_id: int | None  # a text_mention's user
    text: str


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is (from getMe): needed to see mentions and replies to it."""

    id: int
    username: str


@dataclass(frozen=True, slots=True)
class ButtonClick:
    """A press on one of our inline buttons. `decision` is None for data that is not ours."""

    update_id: int
    query_id: str
    clicker: Sender
    decision: Decision | None
    target_id: str
    chat_id: str | None
    message_id: str | None
    memory: str | None = None  # a `/memory` card's button: the core's data, for `Dispatcher.memory_click`
    chat_kind: ChatKind | None = None
    stop_run: str | None = None  # a Stop press on a streaming reply: the run it names
    show: str | None = None  # "Show all" on a card: the approval whose arguments to send whole
    thread_id: int | None = None  # the forum topic the clicked message is in
    question: tuple[str, int] | None = None  # a question card's button: (question id, choice)


def normalize_update(
    update: JSON, *, binding_id: str, bot: BotIdentity, ignore_bots: bool = True
) -> InboundMessage | ButtonClick | None:
    """The update as the core's shape, or None when it is not for the core.

    Dropped: updates of other kinds, channel posts, service messages and messages with
    nothing to read, the bot's own messages, other bots (when `ignore_bots`), anonymous
    senders, and commands addressed to another bot. Raises `Malformed` for a shape it cannot read.
    """
    update_id = _int(update, "update_id")
    query = _obj(update, "callback_query")
    if query is not None:
        return _click(update_id, query)
    edited = _obj(update, "edited_message")
    msg = _obj(update, "message") or edited
    if msg is None:
        return None
    chat = _need_obj(msg, "chat")
    kind = _CHAT_KINDS.get(_str(chat, "type") or "")
    user = _obj(msg, "from")
    if kind is None or user is None:
        return None
    if _int(user, "id") == bot.id or (user.get("is_bot") is True and ignore_bots):
        return None
    text = _str(msg, "text")
    entities_key = "entities" if text is not None else "caption_entities"
    if text is None:
        text = _str(msg, "caption") or ""
    attachments = _attachments(msg)
    if not text.strip() and not attachments:
        return None
    addressed = _addressed(text, _entities(msg, entities_key, text), bot)
    if addressed is None:
        return None  # a command for another bot
    mentioned, cut = addressed
    thread = _opt_int(msg, "message_thread_id")
    topic = str(thread) if msg.get("is_topic_message") is True and thread else None
    return InboundMessage(
        platform=PLATFORM,
        binding_id=binding_id,
        workspace=str(bot.id),  # two bots in one group are two conversations
        channel=str(_int(chat, "id")),
        chat_kind=kind,
        sender=_sender(user),
        text=_cut_utf16(text, cut),
        event_id=str(update_id),
        message_id=str(_int(msg, "message_id")),
        topic=topic,
        mentioned=mentioned,
        reply_to_bot=_replies_to_bot(msg, bot),
        is_edit=edited is not None,
        attachments=attachments,
        received_at=_date(msg),
    )


def _click(update_id: int, query: JSON) -> ButtonClick:
    data = _str(query, "data")
    parsed = parse_callback_data(data)
    message = _obj(query, "message")  # a MaybeInaccessibleMessage: chat and message_id at least
    chat = _need_obj(message, "chat") if message is not None else None
    topic = message is not None and message.get("is_topic_message") is True
    return ButtonClick(
        update_id=update_id,
        query_id=_need_str(query, "id"),
        clicker=_sender(_need_obj(query, "from")),
        decision=parsed[0] if parsed else None,
        target_id=parsed[1] if parsed else "",
        chat_id=str(_int(chat, "id")) if chat is not None else None,
        message_id=str(_int(message, "message_id")) if message is not None else None,
        memory=parse_memory_data(data),
        chat_kind=_CHAT_KINDS.get(_str(chat, "type") or "") if chat is not None else None,
        stop_run=parse_stop(data),
        show=parse_show_data(data),
        question=parse_question_data(data),
        thread_id=_opt_int(message, "message_thread_id") if message is not None and topic else None,
    )


def _entities(msg: JSON, key: str, text: str) -> list[Entity]:
    """The message's entities with the text each covers, in the order Telegram lists them (a cut
    through a surrogate pair is malformed, as `Message.parse_entities` found it)."""
    raw = msg.get(key)
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise Malformed(f"{key} is not a list of entities")
    units = text.encode("utf-16-le")
    found = []
    for entity in raw:
        offset, length = _int(entity, "offset"), _int(entity, "length")
        found.append(Entity(_str(entity, "type"), offset, length, _user_id(entity),
                            units[offset * 2 : (offset + length) * 2].decode("utf-16-le")))
    return found


def _addressed(text: str, entities: list[Entity], bot: BotIdentity) -> tuple[bool, list[tuple[int, int]]] | None:
    """Whether the message addresses the bot, and the UTF-16 spans to cut from its text."""
    handle = "@" + bot.username.lower()
    mentioned = False
    cut: list[tuple[int, int]] = []
    for kind, offset, length, user_id, value in sorted(entities, key=lambda e: e.offset):
        if kind == MENTION and value.lower() == handle:
            mentioned = True
            cut.append((offset, length))
        elif kind == TEXT_MENTION and user_id == bot.id:
            mentioned = True
            cut.append((offset, length))
        elif kind == BOT_COMMAND and offset == 0:
            command, at, target = value.partition("@")
            if at and target.lower() != bot.username.lower():
                return None
            mentioned = True
            if at:  # keep "/cmd", cut "@botname"
                cut.append((offset + _utf16_len(command), length - _utf16_len(command)))
    return mentioned, cut


def _cut_utf16(text: str, spans: list[tuple[int, int]]) -> str:
    """Remove (offset, length) spans counted in UTF-16 units, then tidy the seams."""
    if not spans:
        return text.strip()
    units = text.encode("utf-16-le")
    pieces: list[bytes] = []
    pos = 0
    for offset, length in sorted(spans):
        pieces.append(units[pos : offset * 2])
        pos = max(pos, (offset + length) * 2)
    pieces.append(units[pos:])
    parts = [p.decode("utf-16-le") for p in pieces]
    # Join the pieces with single spaces where the cut left two, and drop the comma or colon
    # that followed a leading mention ("@bot, what's up" -> "what's up").
    joined = parts[0]
    for part in parts[1:]:
        if joined.endswith((" ", "\n")) and part.startswith(" "):
            part = part[1:]
        elif joined.endswith(" ") and part.startswith((",", ".", ";", ":", "!", "?")):
            joined = joined[:-1]
        joined += part
    joined = joined.strip()
    return joined.lstrip(",:;").lstrip() if not parts[0].strip() else joined


def _replies_to_bot(msg: JSON, bot: BotIdentity) -> bool:
    replied = _obj(msg, "reply_to_message")
    if replied is None or _user_id(replied, "from") != bot.id:
        return False
    # In a forum, a message in a topic points at the topic's creation message.
    return not (msg.get("is_topic_message") is True
                and _int(replied, "message_id") == _opt_int(msg, "message_thread_id"))


def _sender(user: JSON) -> Sender:
    first, last, username = _str(user, "first_name") or "", _str(user, "last_name"), _str(user, "username")
    name = f"{first} {last}" if last else first  # PTB's `User.full_name`
    name = name or (f"@{username}" if username else str(_int(user, "id")))
    return Sender(account_id=str(_int(user, "id")), display_name=name, is_bot=user.get("is_bot") is True)


def _attachments(msg: JSON) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if (d := _obj(msg, "document")) is not None:
        found.append(_attachment(d, "document", "application/octet-stream"))
    photo = msg.get("photo")
    if photo:
        if not isinstance(photo, list) or not isinstance(photo[-1], dict):
            raise Malformed("photo is not a list of sizes")
        largest = photo[-1]
        found.append(Attachment("photo.jpg", "image/jpeg", _opt_int(largest, "file_size"),
                                ref=_need_str(largest, "file_id")))
    for key, default_name, default_type in (("video", "video.mp4", "video/mp4"), ("audio", "audio", "audio/mpeg"),
                                            ("voice", "voice.ogg", "audio/ogg")):
        if (media := _obj(msg, key)) is not None:
            found.append(_attachment(media, default_name, default_type))
    return tuple(found)


def _attachment(media: JSON, default_name: str, default_type: str) -> Attachment:
    return Attachment(_str(media, "file_name") or default_name, _str(media, "mime_type") or default_type,
                      _opt_int(media, "file_size"), ref=_need_str(media, "file_id"))


def _date(msg: JSON) -> datetime:
    when = _opt_int(msg, "edit_date") or _opt_int(msg, "date")
    return datetime.fromtimestamp(when, timezone.utc) if when else datetime.now(timezone.utc)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


# --- reading the JSON: a field of the wrong type is Malformed, never a guess ------------------

_WHAT = {dict: "an object", str: "a string", int: "an integer"}


def _typed(data: JSON, key: str, kind: type) -> Any:
    """`data[key]` if it is a `kind` (a bool is no integer), None when absent, else Malformed."""
    value = data.get(key)
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise Malformed(f"{key} is not {_WHAT[kind]}")
    return value


def _needed(value: Any, key: str) -> Any:
    if value is None:
        raise Malformed(f"no {key}")
    return value


def _obj(data: JSON, key: str) -> JSON | None:
    return _typed(data, key, dict)


def _need_obj(data: JSON, key: str) -> JSON:
    return _needed(_obj(data, key), key)


def _str(data: JSON, key: str) -> str | None:
    return _typed(data, key, str)


def _need_str(data: JSON, key: str) -> str:
    return _needed(_str(data, key), key)


def _opt_int(data: JSON, key: str) -> int | None:
    return _typed(data, key, int)


def _int(data: JSON, key: str) -> int:
    return _needed(_opt_int(data, key), key)


def _user_id(data: JSON, key: str = "user") -> int | None:
    user = _obj(data, key)
    return _int(user, "id") if user is not None else None
