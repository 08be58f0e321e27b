"""The normalized shapes every adapter produces and the core consumes.

An adapter's only job on the way in is to turn a platform event into an `InboundMessage`;
everything after that (dedupe, admission, keying, queueing, running) is the core's, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import StrEnum


class ChatKind(StrEnum):
    """Who will hear the answer: this decides memory scope and admission rules."""

    DM = "dm"  # one person and the bot (also the web chat and the HTTP API)
    GROUP = "group"  # a small private group (Slack mpim, Mattermost G, Telegram group)
    CHANNEL = "channel"  # a named channel many people can join


# The longest name of a person the gateway keeps, in characters (the store's name columns): a platform's
# name for someone enters as a `Sender`, and is cut there, so every place that stores or shows it (a
# message's sender, a run's requester, a card's decider, a stop's who) keeps the same, on either store.
NAME_CHARS = 200


@dataclass(frozen=True, slots=True)
class Sender:
    """A platform account as the platform names it (its name cut to `NAME_CHARS`)."""

    account_id: str
    display_name: str = ""
    is_bot: bool = False

    def __post_init__(self) -> None:
        if len(self.display_name) > NAME_CHARS:
            object.__setattr__(self, "display_name", self.display_name[:NAME_CHARS])


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file shared with a message. The core never fetches it itself: it asks the adapter
    (`Adapter.fetch_attachment`) with `ref`, which only that adapter understands."""

    name: str
    mime_type: str = "application/octet-stream"
    size: int | None = None
    url: str | None = None  # where a person can open it (a permalink)
    ref: str | None = None  # what the adapter fetches it by: Slack url_private, Telegram file_id, Mattermost file id


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True, slots=True)
class CommandAnswer:
    """What the gateway answered a chat command with: a text (`notice`) or the `/memory` card (`memory`).
    `message_id`: the stored message (None where nothing was kept: no conversation yet, or `/link`'s code)."""

    role: str
    text: str
    message_id: int | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message from a person, normalized.

    `thread` is the platform's thread anchor the message belongs to (Slack `thread_ts`,
    Mattermost `root_id`), or None for a top-level message. `topic` is a Telegram forum
    topic. `mentioned` / `reply_to_bot` are facts the adapter can see and the core cannot.
    """

    platform: str
    binding_id: str
    workspace: str
    channel: str
    chat_kind: ChatKind
    sender: Sender
    text: str
    event_id: str
    message_id: str
    thread: str | None = None
    topic: str | None = None
    mentioned: bool = False
    reply_to_bot: bool = False
    is_edit: bool = False
    attachments: tuple[Attachment, ...] = ()
    received_at: datetime = field(default_factory=_now)
    # A second delivery of the same platform message under another event id (Slack sends a
    # channel mention as both `message` and `app_mention`): the ledger also records this.
    dedupe_key: str | None = None


# Platforms whose channels thread replies under a root message: a top-level message in a
# channel or group starts a thread anchored on itself.
_THREADED_PLATFORMS = frozenset({"slack", "mattermost"})


def conversation_key(msg: InboundMessage) -> str:
    """The one place that decides which conversation a message belongs to.

    - Slack / Mattermost: `platform:workspace:channel:thread`. A top-level message in a
      channel or group starts a thread anchored on itself; a DM's top-level messages are one
      conversation, and a thread inside a DM is its own.
    - Telegram: the chat, plus the forum topic when there is one (General has none).
    - web (and anything else): the channel is the conversation.
    """
    base = f"{msg.platform}:{msg.workspace}:{msg.channel}"
    if msg.platform in _THREADED_PLATFORMS:
        thread = msg.thread
        if thread is None and msg.chat_kind is not ChatKind.DM:
            thread = msg.message_id
        return f"{base}:{thread}" if thread else base
    if msg.platform == "telegram":
        return f"{base}:topic:{msg.topic}" if msg.topic else base
    return base


def reply_thread(msg: InboundMessage) -> str | None:
    """Where the answer to `msg` goes: the thread of its conversation (None = top level)."""
    if msg.platform in _THREADED_PLATFORMS:
        if msg.thread is None and msg.chat_kind is not ChatKind.DM:
            return msg.message_id
        return msg.thread
    if msg.platform == "telegram":
        return msg.topic
    return None
