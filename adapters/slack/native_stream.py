"""Slack's native streaming: one reply as chat.startStream, chat.appendStream..., chat.stopStream.

Slack renders the Markdown itself as it arrives (no mrkdwn conversion, no re-sending the whole
text on every edit). A workspace or token without the methods answers `unknown_method` (or
refuses the token type): that comes out as NativeUnavailable, and the adapter stops offering
native streams for the binding.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

from gateway.outbound.adapter import NativeUnavailable, PlatformError, ReplyTarget

Caller = Callable[[str, str, Coroutine[Any, Any, AsyncSlackResponse]], Awaitable[AsyncSlackResponse]]
UNAVAILABLE = ("unknown_method", "not_allowed_token_type", "method_deprecated", "missing_scope")


class SlackNativeStream:
    """One natively streamed reply in one thread."""

    def __init__(self, client: AsyncWebClient, call: Caller, target: ReplyTarget, on_unavailable: Callable[[], None],
                 started: Callable[[str], None] = lambda ts: None) -> None:
        """`started(ts)`: told the stream's message once it exists (its Stop control is a message beside it)."""
        self._client, self._call, self._target, self._off = client, call, target, on_unavailable
        self._started = started
        self._ts = ""

    async def start(self, markdown: str) -> str:
        response = await self._guarded("chat.startStream", self._client.chat_startStream(
            channel=self._target.channel, thread_ts=self._target.thread or "", markdown_text=markdown))
        self._ts = str(response["ts"])
        self._started(self._ts)
        return self._ts

    async def append(self, markdown: str) -> None:
        await self._guarded("chat.appendStream", self._client.chat_appendStream(
            channel=self._target.channel, ts=self._ts, markdown_text=markdown))

    async def stop(self, markdown: str = "") -> str | None:
        await self._guarded("chat.stopStream", self._client.chat_stopStream(
            channel=self._target.channel, ts=self._ts, markdown_text=markdown or None))
        return self._ts

    async def _guarded(self, method: str, request: Coroutine[Any, Any, AsyncSlackResponse]) -> AsyncSlackResponse:
        try:
            return await self._call(method, self._target.channel, request)
        except PlatformError as e:
            if any(reason in str(e) for reason in UNAVAILABLE):
                self._off()
                raise NativeUnavailable(str(e)) from None
            raise
