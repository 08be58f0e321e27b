"""Mattermost websocket events -> InboundMessage. Pure: no I/O, table-tested.

What is decided here is only what the platform says: who posted, where, in which thread,
whether the bot was addressed. Admission (mention required, DM policy, allowlists) is the
core's. Posts the gateway must never see are skipped with a reason: the bot's own posts,
system posts, deleted posts, other integrations' posts when the binding ignores bots, and
channels of teams the binding does not serve.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.messages import Attachment, ChatKind, InboundMessage, Sender

PLATFORM = "mattermost"

CHAT_KINDS = {"D": ChatKind.DM, "G": ChatKind.GROUP, "O": ChatKind.CHANNEL, "P": ChatKind.CHANNEL}

# @channel / @all / @here put every member in `mentions`; they do not address the bot.
_CHANNEL_WIDE = re.compile(r"(?<![\w@])@(channel|all|here)\b", re.IGNORECASE)


class MalformedEvent(ValueError):
    """An event that does not have the shape the server sends; logged and dropped."""


@dataclass(frozen=True, slots=True)
class Skip:
    """A well-formed event the gateway does not act on, and why (for debug logs and tests)."""

    reason: str


@dataclass(frozen=True, slots=True)
class NormalizeContext:
    binding_id: str
    bot_user_id: str
    bot_username: str
    # The server, not the team: Mattermost user and channel ids are server-wide, so one person
    # is one account whether they write in a DM (no team) or in any team's channel.
    workspace: str = ""
    team_ids: frozenset[str] | None = None  # None: every team
    ignore_bots: bool = True
    base_url: str = ""


@dataclass(frozen=True, slots=True)
class PostedEvent:
    """The parts of a `posted` / `post_edited` event normalization needs."""

    post: Mapping[str, Any]
    channel_type: str
    team_id: str
    sender_name: str = ""
    mentions: tuple[str, ...] = ()


def parse_posted(frame: Mapping[str, Any]) -> PostedEvent:
    """Unpack a `posted` frame: `data.post` and `data.mentions` are JSON strings inside the event."""
    data = frame.get("data")
    if not isinstance(data, Mapping):
        raise MalformedEvent("posted event without data")
    post = _json_object(data.get("post"), "data.post")
    mentions: tuple[str, ...] = ()
    if data.get("mentions"):
        try:
            raw = json.loads(data["mentions"]) if isinstance(data["mentions"], str) else data["mentions"]
        except ValueError:
            raise MalformedEvent("data.mentions is not JSON") from None
        if not isinstance(raw, list):
            raise MalformedEvent("data.mentions is not a list")
        mentions = tuple(str(m) for m in raw)
    channel_type = str(data.get("channel_type", ""))
    if channel_type not in CHAT_KINDS:
        raise MalformedEvent(f"unknown channel_type {channel_type!r}")
    return PostedEvent(
        post=post,
        channel_type=channel_type,
        team_id=str(data.get("team_id") or ""),
        sender_name=str(data.get("sender_name") or "").lstrip("@"),
        mentions=mentions,
    )


def parse_edited_post(frame: Mapping[str, Any]) -> Mapping[str, Any]:
    """A `post_edited` frame carries only the post (as a JSON string); the channel is looked up."""
    data = frame.get("data")
    if not isinstance(data, Mapping):
        raise MalformedEvent("post_edited event without data")
    return _json_object(data.get("post"), "data.post")


def parse_reaction(frame: Mapping[str, Any]) -> Mapping[str, Any]:
    """A `reaction_added` frame: `data.reaction` is a JSON string `{user_id, post_id, emoji_name, ...}`."""
    data = frame.get("data")
    if not isinstance(data, Mapping):
        raise MalformedEvent("reaction event without data")
    reaction = _json_object(data.get("reaction"), "data.reaction")
    for key in ("user_id", "post_id", "emoji_name"):
        if not isinstance(reaction.get(key), str) or not reaction[key]:
            raise MalformedEvent(f"reaction without {key}")
    return reaction


def normalize_post(event: PostedEvent, ctx: NormalizeContext, *, is_edit: bool = False) -> InboundMessage | Skip:
    post = event.post
    for key in ("id", "user_id", "channel_id"):
        if not isinstance(post.get(key), str) or not post[key]:
            raise MalformedEvent(f"post without {key}")
    post_id, user_id = str(post["id"]), str(post["user_id"])
    props = post.get("props") if isinstance(post.get("props"), Mapping) else {}
    assert isinstance(props, Mapping)
    if user_id == ctx.bot_user_id:
        return Skip("own post")
    post_type = str(post.get("type") or "")
    if post_type.startswith("system_"):
        return Skip("system post")
    if post.get("delete_at"):
        return Skip("deleted post")
    from_bot = any(_truthy(props.get(k)) for k in ("from_bot", "from_webhook", "from_plugin"))
    if from_bot and ctx.ignore_bots:
        return Skip("from a bot or integration")
    kind = CHAT_KINDS[event.channel_type]
    if ctx.team_ids is not None and kind is ChatKind.CHANNEL and event.team_id not in ctx.team_ids:
        return Skip("team not served by this binding")

    message = str(post.get("message") or "")
    explicit = _mention_pattern(ctx.bot_username).search(message) is not None if ctx.bot_username else False
    if kind is ChatKind.DM:
        mentioned = True  # everything said to the bot in its DM is addressed to it
    elif kind is ChatKind.GROUP:
        mentioned = explicit  # in a group DM `mentions` names every member: only the text counts
    else:
        mentioned = explicit or (ctx.bot_user_id in event.mentions and not _CHANNEL_WIDE.search(message))
    text = strip_mention(message, ctx.bot_username) if ctx.bot_username else message.strip()

    root_id = str(post.get("root_id") or "")
    edit_at = int(post.get("edit_at") or 0)
    return InboundMessage(
        platform=PLATFORM,
        binding_id=ctx.binding_id,
        workspace=ctx.workspace,
        channel=str(post["channel_id"]),
        chat_kind=kind,
        sender=Sender(account_id=user_id, display_name=event.sender_name, is_bot=from_bot),
        text=text,
        # Every replica's websocket sees every post: the post id is the one identity the ledger keeps.
        event_id=f"{post_id}:edit:{edit_at}" if is_edit else post_id,
        message_id=post_id,
        thread=root_id or None,
        mentioned=mentioned,
        is_edit=is_edit,
        attachments=_attachments(post, ctx.base_url),
    )


@functools.lru_cache(maxsize=64)  # a bot username per binding: built once, not per post
def _mention_pattern(username: str) -> re.Pattern[str]:
    # Usernames hold letters, digits, '.', '-' and '_'; a trailing '.' is punctuation.
    return re.compile(rf"(?<![\w@.-])@{re.escape(username)}(?![\w-]|\.\w)", re.IGNORECASE)


@functools.lru_cache(maxsize=64)
def _mention_and_separator(username: str) -> re.Pattern[str]:
    return re.compile(_mention_pattern(username).pattern + r"[:,]?", re.IGNORECASE)


_SPACES = re.compile(r"[ \t]{2,}")


def strip_mention(message: str, username: str) -> str:
    """The text with the bot's @mention removed, with the ':' or ',' that followed it."""
    return _SPACES.sub(" ", _mention_and_separator(username).sub("", message)).strip()


def _attachments(post: Mapping[str, Any], base_url: str) -> tuple[Attachment, ...]:
    metadata = post.get("metadata") if isinstance(post.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    files = metadata.get("files")
    out: list[Attachment] = []
    if isinstance(files, list):
        for f in files:
            if isinstance(f, Mapping) and f.get("id"):
                out.append(Attachment(
                    name=str(f.get("name") or f["id"]),
                    mime_type=str(f.get("mime_type") or "application/octet-stream"),
                    size=int(f["size"]) if isinstance(f.get("size"), int) else None,
                    url=f"{base_url}/api/v4/files/{f['id']}" if base_url else None,
                    ref=str(f["id"]),
                ))
        return tuple(out)
    for fid in post.get("file_ids") or ():
        if isinstance(fid, str) and fid:
            out.append(Attachment(name=fid, url=f"{base_url}/api/v4/files/{fid}" if base_url else None, ref=fid))
    return tuple(out)


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def _json_object(value: Any, what: str) -> Mapping[str, Any]:
    if isinstance(value, Mapping):
        return value
    if not isinstance(value, str):
        raise MalformedEvent(f"{what} missing")
    try:
        obj = json.loads(value)
    except ValueError:
        raise MalformedEvent(f"{what} is not JSON") from None
    if not isinstance(obj, Mapping):
        raise MalformedEvent(f"{what} is not an object")
    return obj
