"""A Telegram update as the gateway's `InboundMessage` (or a button click). Pure: no I/O.

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

from telegram import Message, MessageEntity, Update, User

from gateway.messages import Attachment, ChatKind, InboundMessage, Sender
from gateway.outbound.adapter import Decision

from .cards import parse_callback_data, parse_memory_data, parse_show_data
from .questions import parse_question_data
from .stop import parse_stop

PLATFORM = "telegram"
_CHAT_KINDS = {"private": ChatKind.DM, "group": ChatKind.GROUP, "supergroup": ChatKind.GROUP}


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
    update: Update, *, binding_id: str, bot: BotIdentity, ignore_bots: bool = True
) -> InboundMessage | ButtonClick | None:
    """The update as the core's shape, or None when it is not for the core.

    Dropped: updates of other kinds, channel posts, service messages and messages with
    nothing to read, the bot's own messages, other bots (when `ignore_bots`), anonymous
    senders, and commands addressed to another bot.
    """
    if update.callback_query is not None:
        return _click(update)
    msg = update.message or update.edited_message
    if msg is None:
        return None
    kind = _CHAT_KINDS.get(msg.chat.type)
    user = msg.from_user
    if kind is None or user is None or user.id == bot.id or (user.is_bot and ignore_bots):
        return None
    text, entities = (msg.text, msg.parse_entities()) if msg.text is not None else (
        msg.caption or "", msg.parse_caption_entities())
    attachments = _attachments(msg)
    if not text.strip() and not attachments:
        return None
    addressed = _addressed(text, entities, bot)
    if addressed is None:
        return None  # a command for another bot
    mentioned, cut = addressed
    topic = str(msg.message_thread_id) if msg.is_topic_message and msg.message_thread_id else None
    return InboundMessage(
        platform=PLATFORM,
        binding_id=binding_id,
        workspace=str(bot.id),  # two bots in one group are two conversations
        channel=str(msg.chat.id),
        chat_kind=kind,
        sender=_sender(user),
        text=_cut_utf16(text, cut),
        event_id=str(update.update_id),
        message_id=str(msg.message_id),
        topic=topic,
        mentioned=mentioned,
        reply_to_bot=_replies_to_bot(msg, bot),
        is_edit=update.edited_message is not None,
        attachments=attachments,
        received_at=_date(msg),
    )


def _click(update: Update) -> ButtonClick:
    query = update.callback_query
    assert query is not None
    parsed = parse_callback_data(query.data)
    message = query.message
    return ButtonClick(
        update_id=update.update_id,
        query_id=query.id,
        clicker=_sender(query.from_user),
        decision=parsed[0] if parsed else None,
        target_id=parsed[1] if parsed else "",
        chat_id=str(message.chat.id) if message is not None else None,
        message_id=str(message.message_id) if message is not None else None,
        memory=parse_memory_data(query.data),
        chat_kind=_CHAT_KINDS.get(message.chat.type) if message is not None else None,
        stop_run=parse_stop(query.data),
        show=parse_show_data(query.data),
        question=parse_question_data(query.data),
        thread_id=message.message_thread_id if message is not None and getattr(message, "is_topic_message", False) else None,
    )


def _addressed(
    text: str, entities: dict[MessageEntity, str], bot: BotIdentity
) -> tuple[bool, list[tuple[int, int]]] | None:
    """Whether the message addresses the bot, and the UTF-16 spans to cut from its text."""
    handle = "@" + bot.username.lower()
    mentioned = False
    cut: list[tuple[int, int]] = []
    for entity, value in sorted(entities.items(), key=lambda e: e[0].offset):
        if entity.type == MessageEntity.MENTION and value.lower() == handle:
            mentioned = True
            cut.append((entity.offset, entity.length))
        elif entity.type == MessageEntity.TEXT_MENTION and entity.user is not None and entity.user.id == bot.id:
            mentioned = True
            cut.append((entity.offset, entity.length))
        elif entity.type == MessageEntity.BOT_COMMAND and entity.offset == 0:
            command, at, target = value.partition("@")
            if at and target.lower() != bot.username.lower():
                return None
            mentioned = True
            if at:  # keep "/cmd", cut "@botname"
                cut.append((entity.offset + _utf16_len(command), entity.length - _utf16_len(command)))
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


def _replies_to_bot(msg: Message, bot: BotIdentity) -> bool:
    replied = msg.reply_to_message
    if replied is None or replied.from_user is None or replied.from_user.id != bot.id:
        return False
    # In a forum, a message in a topic points at the topic's creation message.
    return not (msg.is_topic_message and replied.message_id == msg.message_thread_id)


def _sender(user: User) -> Sender:
    name = user.full_name or (f"@{user.username}" if user.username else str(user.id))
    return Sender(account_id=str(user.id), display_name=name, is_bot=user.is_bot)


def _attachments(msg: Message) -> tuple[Attachment, ...]:
    found: list[Attachment] = []
    if msg.document is not None:
        d = msg.document
        found.append(Attachment(d.file_name or "document", d.mime_type or "application/octet-stream", d.file_size,
                                ref=d.file_id))
    if msg.photo:
        largest = msg.photo[-1]
        found.append(Attachment("photo.jpg", "image/jpeg", largest.file_size, ref=largest.file_id))
    for media, default_name, default_type in ((msg.video, "video.mp4", "video/mp4"),
                                              (msg.audio, "audio", "audio/mpeg"),
                                              (msg.voice, "voice.ogg", "audio/ogg")):
        if media is not None:
            name = getattr(media, "file_name", None) or default_name
            found.append(Attachment(name, media.mime_type or default_type, media.file_size, ref=media.file_id))
    return tuple(found)


def _date(msg: Message) -> datetime:
    when = msg.edit_date or msg.date
    return when if when is not None else datetime.now(timezone.utc)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2
