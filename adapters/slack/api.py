"""The Web API edge: one shared client, errors translated, user names cached.

Every call the adapter makes goes through `call()`, so a 429 always becomes
`RateLimited(retry_after, method)` for the core to honour, and any other refusal a
`PlatformError` naming Slack's error code (never a token).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import aiohttp

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
T = TypeVar("T")
NOT_VISIBLE = frozenset({"channel_not_found", "not_in_channel", "is_archived", "thread_not_found"})


async def call(method: str, request: Awaitable[T]) -> T:
    """Await one Web API request; Slack's refusals come out as the core's exceptions."""
    try:
        return await request
    except SlackApiError as e:
        response = e.response
        raise refusal(method, response.status_code, response.get("error"), response.headers) from None
    except SlackClientError as e:
        raise PlatformError(f"slack {method}: {type(e).__name__}") from None


def refusal(method: str, status: int, error: str | None, headers: Any) -> PlatformError:
    """What a Web API answer that is not `ok` means to the core: a 429 (or `ratelimited`) is RateLimited
    with its Retry-After, anything else a PlatformError naming Slack's error code."""
    if status == 429 or error == "ratelimited":
        return RateLimited(_retry_after(headers), method)
    if error == TOO_LARGE:
        return FileTooLarge(f"slack {method}: {error}: this workspace's admins restrict the size of uploads "
                            "(Slack itself takes files up to 1 GB)")
    kind = NotVisible if error in NOT_VISIBLE else PlatformError  # the bot's token cannot see it
    return kind(f"slack {method}: {error or status}")


class Unreached(PlatformError):
    """A call that got no answer from Slack (the connection failed): nothing Slack said about it."""


# What a reused keep-alive connection the server had closed meanwhile raises: the call never reached Slack,
# and goes once more on a new connection (the SDK's own retry handler does this for every call it makes).
STALE_CONNECTION = (aiohttp.ServerDisconnectedError, aiohttp.ServerConnectionError, aiohttp.ClientOSError)


class JsonPost:
    """One Web API method posted straight on the binding's session, its answer read for `ok` alone.

    For a cosmetic call made with every message (assistant.threads.setStatus): `AsyncWebClient.api_call`
    builds its request arguments, headers and URL per call, sets up its retry handlers' request and state,
    and wraps the answer in an `AsyncSlackResponse`, about 140 function calls on the loop of a call whose
    answer is `{"ok": true}` (bench/README.md, Round 16). The wire is the SDK's own for a JSON call: the
    same URL, headers (`client.headers` hold its User-Agent), bearer token, JSON body, proxy and TLS
    settings; refusals come out as `call`'s do (`refusal`)."""

    __slots__ = ("_session", "_url", "_headers", "_proxy", "_ssl", "_method")

    def __init__(self, session: aiohttp.ClientSession, client: AsyncWebClient, method: str) -> None:
        self._session, self._method = session, method
        self._url = client.base_url + method  # the SDK's base_url ends with "/"
        self._headers = {"Content-Type": "application/json;charset=utf-8",
                         **({"Authorization": f"Bearer {client.token}"} if client.token else {}), **client.headers}
        self._proxy, self._ssl = client.proxy, client.ssl

    async def __call__(self, **args: str) -> None:
        body = json.dumps(args).encode()  # what aiohttp's `json=` sends for the SDK
        for attempt in (1, 2):
            try:
                async with self._session.post(self._url, data=body, headers=self._headers, proxy=self._proxy,
                                              ssl=self._ssl) as answer:
                    raw = await answer.read()  # read whole, so the connection goes back to the pool
                break
            except STALE_CONNECTION as e:
                if attempt == 2:
                    raise Unreached(f"slack {self._method}: {type(e).__name__}") from None
            except (aiohttp.ClientError, asyncio.TimeoutError) as e:
                raise Unreached(f"slack {self._method}: {type(e).__name__}") from None
        if answer.status == 429:  # the Retry-After is all it says
            raise RateLimited(_retry_after(answer.headers), self._method)
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if answer.status != 200 or not isinstance(data, dict) or not data.get("ok"):
            error = data.get("error") if isinstance(data, dict) else None
            raise refusal(self._method, answer.status, error, answer.headers)


def sdk_logger(parent: logging.Logger, name: str) -> logging.Logger:
    """A slack_sdk client's logger: a library's, so WARNING and up, under the binding's name.

    The SDK writes each Web API request and answer, and each Socket Mode frame, at DEBUG, bodies included
    (a reply's text, a status line, a person's message), which no log line may carry (docs/security.md,
    "Logs"): under the binding's own logger they were written at `logging.level: debug`. The Web API
    client also decides to build those lines by the logger's own `level`, not by whether it is enabled
    (`if logger.level <= logging.DEBUG`): under a logger with no level of its own it formatted both for
    every call, logged or not (~25 function calls a call, bench/README.md, Round 16)."""
    logger = parent.getChild(name)
    logger.setLevel(logging.WARNING)
    return logger


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
