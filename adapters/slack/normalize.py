"""Slack Events API bodies → `InboundMessage`. Pure: no I/O, tested as a table.

Which events become messages is decided here: people's `message` and `app_mention` events;
never the bot's own posts (Slack echoes them back), never system subtypes (joins, topic
changes, deletions, hidden events). A channel mention arrives as both `message` and
`app_mention` under different event ids: both carry the same `dedupe_key` (channel + ts), so
the core's ledger runs it once.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.messages import Attachment, ChatKind, InboundMessage, Sender

PLATFORM = "slack"

# Subtypes that are a person (or, when admitted, a bot) saying something. Everything else
# (channel_join, channel_topic, message_deleted, message_replied, ...) is a system event.
_SPOKEN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast", "me_message"})

_CHANNEL_TYPES = {"im": ChatKind.DM, "mpim": ChatKind.GROUP, "channel": ChatKind.CHANNEL, "group": ChatKind.CHANNEL}
_LINK = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")
_CHANNEL_REF = re.compile(r"<#(C[A-Z0-9]+|G[A-Z0-9]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(here|channel|everyone)(?:\|[^>]*)?>")


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who 'the bot' is in this workspace: its user id (for mentions) and bot id (for echoes)."""

    user_id: str
    bot_id: str = ""


def chat_kind(channel_type: str | None, channel_id: str) -> ChatKind | None:
    """`channel_type` when the event has it (`message` does); else what the id tells.

    `app_mention` carries no `channel_type`. `D…` is a DM and `C…` a channel; a `G…` id is a
    private channel or a group DM, which only the API can tell apart: None means "ask".
    """
    if channel_type in _CHANNEL_TYPES:
        return _CHANNEL_TYPES[channel_type]
    if channel_id.startswith("D"):
        return ChatKind.DM
    if channel_id.startswith("C"):
        return ChatKind.CHANNEL
    return None


def normalize_event(
    body: Mapping[str, Any],
    *,
    binding_id: str,
    bot: BotIdentity,
    kind: ChatKind | None = None,
    include_edits: bool = False,
    admit_bots: bool = False,
) -> InboundMessage | None:
    """The message a person sent, or None for anything the gateway does not answer.

    `kind` overrides the chat kind when the adapter has resolved it (a `G…` channel);
    `include_edits` turns `message_changed` into an `is_edit` message instead of dropping it;
    `admit_bots` lets other bots' messages through (the bot's own never pass).
    Raises KeyError / TypeError / ValueError on a malformed body: the caller logs and drops it.
    """
    event = body["event"]
    etype = event["type"]
    if etype not in ("message", "app_mention"):
        return None
    subtype = event.get("subtype")
    is_edit = False
    if etype == "message" and subtype == "message_changed":
        inner = event.get("message") or {}
        # Slack also sends message_changed when a thread gets a reply or a link unfurls;
        # only an `edited` stamp means the author changed the text.
        if not include_edits or "edited" not in inner:
            return None
        is_edit = True
        message = {**inner, "channel": event["channel"]}
        subtype = inner.get("subtype")
    else:
        if event.get("hidden"):
            return None
        message = event

    if _own(message, bot):
        return None  # our own post, echoed back
    bot_id = message.get("bot_id")
    user = message.get("user") or ""
    is_bot = bool(bot_id) or subtype == "bot_message"
    if subtype not in _SPOKEN_SUBTYPES and not (subtype == "bot_message" and admit_bots):
        return None
    if is_bot and not admit_bots:
        return None
    if not user:
        if not is_bot:
            return None
        user = bot_id or ""  # a classic bot_message has only a bot id

    channel: str = event["channel"]
    ts: str = message["ts"]
    resolved = kind or chat_kind(event.get("channel_type"), channel)
    if resolved is None:
        raise ValueError(f"cannot tell the chat kind of channel {channel}")
    text = message.get("text") or ""
    mentioned = etype == "app_mention" or bool(_mention(bot.user_id).search(text))
    thread_ts = message.get("thread_ts")
    edited = (message.get("edited") or {}).get("ts", "")
    return InboundMessage(
        platform=PLATFORM,
        binding_id=binding_id,
        workspace=body.get("team_id") or event.get("team") or "",
        channel=channel,
        chat_kind=resolved,
        sender=Sender(account_id=user, display_name=message.get("username") or "", is_bot=is_bot),
        text=plain_text(text, bot.user_id),
        event_id=body["event_id"],
        message_id=ts,
        thread=thread_ts if thread_ts and thread_ts != ts else None,
        mentioned=mentioned,
        reply_to_bot=bool(thread_ts) and message.get("parent_user_id") == bot.user_id,
        is_edit=is_edit,
        attachments=tuple(_attachment(f) for f in message.get("files") or () if isinstance(f, Mapping)),
        dedupe_key=dedupe_key(channel, ts, edited if is_edit else None),
    )


def dedupe_key(channel: str, ts: str, edited: str | None = None) -> str:
    """A message's key in the core's ledger: channel + ts, which both events of a pair carry; an
    edit (its `edited.ts`) is a message of its own."""
    return f"{channel}:{ts}:edit:{edited}" if edited is not None else f"{channel}:{ts}"


def echoed(body: Any, bot: BotIdentity) -> bool:
    """An event callback's raw body, before anything parses it: the bot's own post, echoed back
    (nothing to hand over; `normalize_event` would say None)."""
    event = _spoken(body)
    return event is not None and _own(event, bot)


def pair_key(body: Any) -> str | None:
    """An event callback's raw body, before anything parses it: the dedupe key of the message it
    carries (`normalize_event`'s, which the core may know already: the mention's other event), or
    None for anything else, a malformed body too (it goes the whole way, and is refused there)."""
    event = _spoken(body)
    channel, ts = (event.get("channel"), event.get("ts")) if event is not None else (None, None)
    return dedupe_key(channel, ts) if isinstance(channel, str) and isinstance(ts, str) else None


def _spoken(body: Any) -> dict[str, Any] | None:
    """The `message` or `app_mention` event of a raw body, unless an edit (`message_changed`: the
    message is its inner one, and an edit's key is its own)."""
    event = body.get("event") if isinstance(body, dict) else None
    if not isinstance(event, dict) or event.get("type") not in ("message", "app_mention"):
        return None
    return None if event.get("subtype") == "message_changed" else event


def _own(message: Mapping[str, Any], bot: BotIdentity) -> bool:
    """The bot's own post (Slack echoes every one back): its user id, or its bot id."""
    bot_id = message.get("bot_id")
    return (message.get("user") or "") == bot.user_id or bool(bot_id and bot_id == bot.bot_id)


def plain_text(text: str, bot_user_id: str) -> str:
    """Slack's wire text as a person reads it: the bot's mention gone, links and escapes undone.

    Other people's mentions stay as `<@U…>` so a reply can address them.
    """
    text = _mention(bot_user_id).sub("", text)
    text = _LINK.sub(lambda m: m.group(1) if not m.group(2) or m.group(2) == m.group(1) else f"{m.group(2)} ({m.group(1)})", text)
    text = _CHANNEL_REF.sub(lambda m: f"#{m.group(2) or m.group(1)}", text)
    text = _SPECIAL.sub(lambda m: f"@{m.group(1)}", text)
    text = html.unescape(text) if "&" in text else text
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def _mention(user_id: str) -> re.Pattern[str]:
    return re.compile(rf"<@{re.escape(user_id)}(?:\|[^>]*)?>")


def _attachment(f: Mapping[str, Any]) -> Attachment:
    size = f.get("size")
    return Attachment(
        name=str(f.get("name") or f.get("title") or f.get("id") or "file"),
        mime_type=str(f.get("mimetype") or "application/octet-stream"),
        size=int(size) if isinstance(size, (int, float)) else None,
        url=f.get("permalink") or f.get("url_private"),
        ref=f.get("url_private_download") or f.get("url_private"),
    )
