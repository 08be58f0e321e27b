"""The four channel tools, answered with the bot's own token (its permissions are the boundary)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timezone
from types import MappingProxyType

from gateway.outbound.adapter import (
    CHANNEL_TOOL_IDS,
    ChannelInfo,
    ChannelMember,
    HistoryMessage,
    ReplyTarget,
)

from .client import Channel, MattermostClient, Post, User


def _display(user: User) -> str:
    full = f"{user.get('first_name', '')} {user.get('last_name', '')}".strip()
    return user.get("nickname") or full


def _info(channel: Channel, member_count: int | None = None) -> ChannelInfo:
    return ChannelInfo(
        id=channel.get("id", ""),
        name=channel.get("display_name") or channel.get("name", ""),
        purpose=channel.get("purpose", ""),
        topic=channel.get("header", ""),
        member_count=member_count,
        is_private=channel.get("type") != "O",
    )


class MattermostDirectory:
    """Directory questions about the channel a message came from (the core binds the target)."""

    supported = frozenset(CHANNEL_TOOL_IDS)
    notes: Mapping[str, str] = MappingProxyType({})  # every answer is what it says: nothing to add

    def __init__(self, client: Callable[[], MattermostClient], *, team_ids: Callable[[], Iterable[str]],
                 channel: Callable[[str], Awaitable[Channel]]) -> None:
        self._get_client = client  # the adapter's client, which exists once it has started
        self._team_ids = team_ids  # the teams searched from a DM or group, which have none
        self._channel = channel  # a cached channel lookup
        self._users: dict[str, User] = {}

    @property
    def _client(self) -> MattermostClient:
        return self._get_client()

    async def channel_info(self, target: ReplyTarget) -> ChannelInfo:
        channel = await self._client.channel(target.channel)
        stats = await self._client.channel_stats(target.channel)
        return _info(channel, stats.get("member_count"))

    async def channel_members(self, target: ReplyTarget, limit: int) -> tuple[list[ChannelMember], bool]:
        # One more than asked tells whether the list was cut.
        members = await self._client.channel_members(target.channel, per_page=min(limit + 1, 200))
        cut = len(members) > limit
        users = await self._users_for([m.get("user_id", "") for m in members[:limit]])
        out = [
            ChannelMember(account_id=uid, name=u.get("username", uid), display_name=_display(u), is_bot=bool(u.get("is_bot")))
            for uid, u in users
        ]
        return out, cut

    async def is_member(self, target: ReplyTarget, account_id: str) -> bool:
        """`GET /channels/{id}/members/{user_id}`: one call, whatever the channel's size."""
        return await self._client.is_channel_member(target.channel, account_id)

    async def search_channels(self, target: ReplyTarget, query: str, limit: int) -> tuple[list[ChannelInfo], bool]:
        """Public channels whose name or purpose matches, in the channel's team (or the bot's teams)."""
        team_id = (await self._channel(target.channel)).get("team_id", "")
        teams = [team_id] if team_id else list(self._team_ids())
        found: dict[str, Channel] = {}
        for team_id in teams:
            for channel in await self._client.search_team_channels(team_id, query):
                found.setdefault(channel.get("id", ""), channel)
        channels = list(found.values())
        return [_info(c) for c in channels[:limit]], len(channels) > limit

    async def channel_history(self, target: ReplyTarget, limit: int) -> tuple[list[HistoryMessage], bool]:
        if target.thread:
            listing = await self._client.thread(target.thread)
        else:
            listing = await self._client.channel_posts(target.channel, per_page=min(limit + 1, 200))
        posts: list[Post] = [
            p for p in (listing.get("posts") or {}).values()
            if not str(p.get("type") or "").startswith("system_") and not p.get("delete_at")
        ]
        posts.sort(key=lambda p: p.get("create_at", 0))
        cut = len(posts) > limit
        posts = posts[-limit:] if limit > 0 else []
        authors = dict(await self._users_for([p.get("user_id", "") for p in posts]))
        return [
            HistoryMessage(
                author=authors.get(p.get("user_id", ""), {}).get("username", p.get("user_id", "")),
                text=p.get("message", ""),
                ts=datetime.fromtimestamp(p.get("create_at", 0) / 1000, tz=timezone.utc),
            )
            for p in posts
        ], cut

    async def _users_for(self, ids: list[str]) -> list[tuple[str, User]]:
        """Users in the order asked, fetched once each and then cached."""
        missing = sorted({i for i in ids if i and i not in self._users})
        for user in await self._client.users_by_ids(missing):
            self._users[user.get("id", "")] = user
        return [(i, self._users.get(i, User(id=i, username=i))) for i in ids if i]
