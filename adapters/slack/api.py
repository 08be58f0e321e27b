"""The Web API edge: one shared client, errors translated, user names cached.

Every call the adapter makes goes through `call()`, so a 429 always becomes
`RateLimited(retry_after, method)` for the core to honour, and any other refusal a
`PlatformError` naming Slack's error code (never a token).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from gateway.clock import Clock
from gateway.outbound.adapter import FileTooLarge, NotVisible, PlatformError, RateLimited

DEFAULT_RETRY_AFTER = 1.0
# files.getUploadURLExternal's refusal of a `length` over the team's own cap ("The size of provided file is
# too large, as the team has restricted uploads of large files": docs.slack.dev/reference/methods/
# files.getUploadURLExternal, Errors). Slack has no `file_too_large` code for it.
TOO_LARGE = "file_upload_size_restricted"
NOT_VISIBLE = frozenset({"channel_not_found", "not_in_channel", "is_archived", "thread_not_found"})


async def call(method: str, request: Awaitable[AsyncSlackResponse]) -> AsyncSlackResponse:
    """Await one Web API request; Slack's refusals come out as the core's exceptions."""
    try:
        return await request
    except SlackApiError as e:
        response = e.response
        if response.status_code == 429 or response.get("error") == "ratelimited":
            raise RateLimited(_retry_after(response.headers), method) from None
        error = response.get("error")
        kind = NotVisible if error in NOT_VISIBLE else PlatformError  # the bot's token cannot see it
        if error == TOO_LARGE:
            raise FileTooLarge(f"slack {method}: {error}: this workspace's admins restrict the size of uploads "
                               "(Slack itself takes files up to 1 GB)") from None
        raise kind(f"slack {method}: {error or response.status_code}") from None
    except SlackClientError as e:
        raise PlatformError(f"slack {method}: {type(e).__name__}") from None


def _retry_after(headers: Any) -> float:
    try:
        value = headers.get("Retry-After") or headers.get("retry-after")
        return max(float(value), 0.0) if value is not None else DEFAULT_RETRY_AFTER
    except (TypeError, ValueError, AttributeError):
        return DEFAULT_RETRY_AFTER


@dataclass
class SlackConnection:
    """What exists only after start(): the client, the cached user names, who the bot is."""

    client: AsyncWebClient | None = None
    users: UserNames | None = None
    bot_user_id: str = ""
    bot_id: str = ""

    def require_client(self) -> AsyncWebClient:
        if self.client is None:
            raise PlatformError("slack is not connected yet")
        return self.client

    def require_users(self) -> UserNames:
        if self.users is None:
            raise PlatformError("slack is not connected yet")
        return self.users


# One Web API call as (method, channel, request): the adapter's sender waits for the method's tier
# and the channel's budget first (adapters/slack/budget.py), so nothing the adapter calls can cause
# our own 429s. `channel` is "" for a workspace-wide method.
Send = Callable[[str, str, Coroutine[Any, Any, AsyncSlackResponse]], Awaitable[AsyncSlackResponse]]


class UserNames:
    """users.info, cached: a sender's name is looked up once per `ttl`, not once per message."""

    def __init__(self, client: AsyncWebClient, send: Send, *, ttl: float = 3600.0, size: int = 5000,
                 clock: Clock | None = None) -> None:
        self._client, self._send, self._ttl, self._size = client, send, ttl, size
        self._clock = clock or Clock()  # the gateway's: a name's age is counted in its time
        self._cache: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[dict[str, Any] | None]] = {}

    async def user(self, user_id: str) -> dict[str, Any] | None:
        """The users.info `user` object, or None when Slack does not know or will not say."""
        hit = self._cache.get(user_id)
        if hit and self._clock.monotonic() - hit[0] < self._ttl:
            self._cache.move_to_end(user_id)
            return hit[1]
        # A channel mention arrives as two events at once: one lookup serves both.
        pending = self._inflight.get(user_id)
        if pending is None:
            pending = asyncio.ensure_future(self._fetch(user_id))
            self._inflight[user_id] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(user_id, None))
        user = await asyncio.shield(pending)
        return user if user is not None else (hit[1] if hit else None)  # a stale name beats none

    async def _fetch(self, user_id: str) -> dict[str, Any] | None:
        try:
            response = await self._send("users.info", "", self._client.users_info(user=user_id))
        except PlatformError:
            return None
        user = response.get("user") or {}
        self._cache[user_id] = (self._clock.monotonic(), user)
        if len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return user

    async def display_name(self, user_id: str) -> str:
        return display_name(await self.user(user_id) or {}) or user_id


def display_name(user: dict[str, Any]) -> str:
    """How Slack shows a person: their display name, else real name, else handle."""
    profile = user.get("profile") or {}
    return str(profile.get("display_name") or profile.get("real_name") or user.get("real_name") or user.get("name") or "")
