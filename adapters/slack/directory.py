"""The channel tools on Slack, answered with the bot's own token.

The target is always the channel the message arrived in (the core binds it); what the bot's
token cannot see, Slack refuses, and that refusal is the whole permission boundary.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from gateway.outbound.adapter import (
    CHANNEL_TOOL_IDS,
    ChannelInfo,
    ChannelMember,
    HistoryMessage,
    PlatformError,
    ReplyTarget,
)

from .api import Send, SlackConnection, UserNames, display_name
from .normalize import plain_text

PAGE = 200  # Slack's recommended page size for conversations.* and users.*
MAX_LIST_PAGES = 10  # search_channels reads at most this many pages of conversations.list
MAX_REPLY_PAGES = 10  # a thread longer than this is read from its start only
MAX_MEMBER_PAGES = 25  # is_member reads up to 5,000 members; past that it cannot say


class SlackDirectory:
    """get_channel_info, list_channel_members, search_channels, read_channel_history."""

    supported = frozenset(CHANNEL_TOOL_IDS)
    notes: Mapping[str, str] = MappingProxyType({})  # every answer is what it says: nothing to add

    def __init__(self, conn: SlackConnection, send: Send) -> None:
        # The connection is filled in by the adapter's start(); the core may hold the
        # directory before that, and a tool called too early gets a PlatformError. Every call
        # goes through the adapter's paced `send`: a search reads up to ten pages of a Tier 2
        # method, and a member list looks up to 200 people.
        self._conn, self._send = conn, send

    @property
    def _client(self) -> AsyncWebClient:
        return self._conn.require_client()

    @property
    def _users(self) -> UserNames:
        return self._conn.require_users()

    async def channel_info(self, target: ReplyTarget) -> ChannelInfo:
        response = await self._send(
            "conversations.info", "", self._client.conversations_info(channel=target.channel, include_num_members=True)
        )
        return _info(response["channel"])

    async def channel_members(self, target: ReplyTarget, limit: int) -> tuple[list[ChannelMember], bool]:
        # Ask for one more than needed: whether there is more is the truncation flag.
        response = await self._send(
            "conversations.members", "",
            self._client.conversations_members(channel=target.channel, limit=min(limit + 1, PAGE)),
        )
        ids: list[str] = list(response.get("members") or [])
        more = bool((response.get("response_metadata") or {}).get("next_cursor")) or len(ids) > limit
        members = []
        for user_id in ids[:limit]:
            user = await self._users.user(user_id) or {}
            members.append(
                ChannelMember(
                    account_id=user_id,
                    name=str(user.get("name") or user_id),
                    display_name=display_name(user),
                    is_bot=bool(user.get("is_bot")),
                )
            )
        return members, more

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        """Whether `account_id` is in the channel now: conversations.members, paged (users.conversations
        would need the person's own token to list their private channels)."""
        cursor = ""
        for _ in range(MAX_MEMBER_PAGES):
            response = await self._send(
                "conversations.members", "",
                self._client.conversations_members(channel=target.channel, limit=PAGE, cursor=cursor or None),
            )
            if account_id in (response.get("members") or []):
                return True
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                return False
        raise PlatformError(f"more than {MAX_MEMBER_PAGES * PAGE} members: membership not confirmed")

    async def search_channels(self, target: ReplyTarget, query: str, limit: int) -> tuple[list[ChannelInfo], bool]:
        """Channels whose name or purpose contains `query` (case-insensitive); no messages are read."""
        needle = query.strip().lower().lstrip("#")
        found: list[ChannelInfo] = []
        cursor = ""
        for _ in range(MAX_LIST_PAGES):
            response = await self._send(
                "conversations.list", "",
                self._client.conversations_list(
                    types="public_channel,private_channel", exclude_archived=True, limit=PAGE, cursor=cursor or None
                ),
            )
            for channel in response.get("channels") or []:
                info = _info(channel)
                if needle in info.name.lower() or needle in info.purpose.lower() or needle in info.topic.lower():
                    found.append(info)
                    if len(found) > limit:
                        return found[:limit], True
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                return found, False
        return found, True  # pages left unread: there may be more matches

    async def channel_history(self, target: ReplyTarget, limit: int) -> tuple[list[HistoryMessage], bool]:
        """The newest `limit` messages of the thread (when the target has one) or channel, newest last."""
        if target.thread:
            raw, more = await self._thread(target.channel, target.thread, limit)
        else:
            response = await self._send(
                "conversations.history", "",
                self._client.conversations_history(channel=target.channel, limit=min(limit + 1, PAGE)),
            )
            newest_first = list(response.get("messages") or [])
            more = len(newest_first) > limit or bool(response.get("has_more"))
            raw = list(reversed(newest_first[:limit]))
        return [await self._history_message(m) for m in raw], more

    async def _thread(self, channel: str, thread: str, limit: int) -> tuple[list[dict[str, Any]], bool]:
        # conversations.replies pages oldest first: read to the end, keep the last `limit`.
        messages: list[dict[str, Any]] = []
        cursor = ""
        for _ in range(MAX_REPLY_PAGES):
            response = await self._send(
                "conversations.replies", "",
                self._client.conversations_replies(channel=channel, ts=thread, limit=PAGE, cursor=cursor or None),
            )
            messages.extend(response.get("messages") or [])
            cursor = (response.get("response_metadata") or {}).get("next_cursor") or ""
            if not cursor:
                break
        return messages[-limit:], len(messages) > limit or bool(cursor)

    async def _history_message(self, m: dict[str, Any]) -> HistoryMessage:
        if m.get("user"):
            author = await self._users.display_name(m["user"])
        else:
            author = str(m.get("username") or m.get("bot_id") or "unknown")
        try:
            ts = datetime.fromtimestamp(float(m["ts"]), tz=timezone.utc)
        except (KeyError, TypeError, ValueError):
            ts = None
        return HistoryMessage(author=author, text=plain_text(m.get("text") or "", self._conn.bot_user_id), ts=ts)


def _info(channel: dict[str, Any]) -> ChannelInfo:
    return ChannelInfo(
        id=str(channel["id"]),
        name=str(channel.get("name") or channel.get("user") or channel["id"]),
        purpose=str((channel.get("purpose") or {}).get("value") or ""),
        topic=str((channel.get("topic") or {}).get("value") or ""),
        member_count=channel.get("num_members"),
        is_private=channel.get("is_private"),
    )
