"""An in-process chat platform: an adapter that records what the gateway says, and a channel directory.

It stands in for the adapter side only (errbot's test backend, httpx's mock transport): the
gateway, its store and the runs are real. Register it for a platform with `fake_platforms`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from gateway import adapter_registry as base
from gateway.adapter_registry import AdapterContext
from bindings.models import BindingSpec
from gateway.outbound.adapter import (
    CHANNEL_TOOL_IDS,
    AdapterHealth,
    AnswersDirectory,
    ApprovalCard,
    ChannelInfo,
    ChannelMember,
    ConfirmsMembership,
    HistoryMessage,
    NotVisible,
    PlatformLimits,
    ReplyTarget,
)


@dataclass
class FakeDirectory:
    """Channels the bot can see, by id; any other channel raises NotVisible like a real platform."""

    channels: dict[str, ChannelInfo] = field(default_factory=dict)
    members: dict[str, list[ChannelMember]] = field(default_factory=dict)
    history: dict[str, list[HistoryMessage]] = field(default_factory=dict)  # by channel, or channel/thread
    supported: frozenset[str] = frozenset(CHANNEL_TOOL_IDS)
    notes: dict[str, str] = field(default_factory=dict)  # by tool id: added to that tool's description
    calls: list[tuple[str, str, str | None]] = field(default_factory=list)  # (method, channel, thread)

    def _seen(self, method: str, target: ReplyTarget) -> None:
        self.calls.append((method, target.channel, target.thread))
        if target.channel not in self.channels:
            raise NotVisible(f"not_in_channel: {target.channel}")

    async def channel_info(self, target: ReplyTarget) -> ChannelInfo:
        self._seen("channel_info", target)
        return self.channels[target.channel]

    async def channel_members(self, target: ReplyTarget, limit: int) -> tuple[list[ChannelMember], bool]:
        self._seen("channel_members", target)
        everyone = self.members.get(target.channel, [])
        return everyone[:limit], len(everyone) > limit

    async def search_channels(self, target: ReplyTarget, query: str, limit: int) -> tuple[list[ChannelInfo], bool]:
        self.calls.append(("search_channels", target.channel, target.thread))
        found = [c for c in self.channels.values() if query.lower() in f"{c.name} {c.purpose}".lower()]
        return found[:limit], len(found) > limit

    async def channel_history(self, target: ReplyTarget, limit: int) -> tuple[list[HistoryMessage], bool]:
        self._seen("channel_history", target)
        key = f"{target.channel}/{target.thread}" if target.thread else target.channel
        messages = self.history.get(key, [])
        return messages[-limit:], len(messages) > limit


DIRECTORIES: dict[str, FakeDirectory | None] = {}  # by binding id: what `directory()` answers


class FakeChatAdapter(AnswersDirectory, ConfirmsMembership):
    """Records posts and private messages; serves the directory set for its binding in DIRECTORIES.
    Who is in a channel is `members` (channel id -> account ids); anyone else is not.

    No other feature: no buttons (`/memory` answers in text), no native stream, no status line, and
    its files are named, never fetched."""

    limits = PlatformLimits(max_message_chars=100_000, min_edit_interval=0.0)

    def __init__(self, binding: BindingSpec, context: AdapterContext) -> None:
        self.platform = binding.platform
        self.binding_id = binding.id
        self.posts: dict[str, tuple[ReplyTarget, str]] = {}
        self.private: list[tuple[ReplyTarget, str, str]] = []  # (target, account, text)
        self.cards: list[ApprovalCard] = []
        self.members: dict[str, set[str]] = {}
        self.membership_asked: list[tuple[str, str]] = []  # (channel, account) per is_member call

    async def start(self, dispatcher: Any) -> None:
        self.dispatcher = dispatcher

    async def stop(self) -> None:
        return None

    def health(self) -> AdapterHealth:
        return AdapterHealth(connected=True, since=datetime.now(timezone.utc))

    def http_routes(self) -> Sequence[Any]:
        return []

    def render(self, markdown: str) -> str:
        return markdown

    async def post_message(self, target: ReplyTarget, text: str) -> str:
        message_id = f"m{len(self.posts) + 1}"
        self.posts[message_id] = (target, text)
        return message_id

    async def edit_message(self, target: ReplyTarget, message_id: str, text: str) -> None:
        self.posts[message_id] = (target, text)

    async def show_typing(self, target: ReplyTarget) -> None:
        return None

    async def post_card(self, target: ReplyTarget, card: ApprovalCard) -> str:
        self.cards.append(card)
        return card.card_id

    async def update_card(self, target: ReplyTarget, card_ref: str, card: ApprovalCard) -> None:
        self.cards.append(card)

    async def tell_privately(self, target: ReplyTarget, account_id: str, text: str) -> None:
        self.private.append((target, account_id, text))

    def directory(self) -> FakeDirectory | None:
        return DIRECTORIES.get(self.binding_id)

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        self.membership_asked.append((target.channel, account_id))
        return account_id in self.members.get(target.channel, set())

    def forget(self, message_ids: Sequence[str]) -> None:
        return None



@contextlib.contextmanager
def fake_platforms(*platforms: str) -> Iterator[None]:
    """Serve these platforms' bindings with FakeChatAdapter for the duration."""
    saved = dict(base._REGISTRY)
    for platform in platforms:
        base.register(platform, f"{__name__}:FakeChatAdapter")
    try:
        yield
    finally:
        base._REGISTRY.clear()
        base._REGISTRY.update(saved)
        DIRECTORIES.clear()
