"""Calls a fake server is answering right now, for `tests.support.settled`.

An aiohttp middleware every fake installs. A call that waits by design, a long poll
(Telegram's getUpdates) or a websocket (Slack's Socket Mode, Mattermost's event stream), is
the client listening, not work in flight, and is not counted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class InFlight:
    def __init__(self, *, listening: tuple[str, ...] = ()) -> None:
        self.calls = 0
        self._listening = listening  # path endings of the calls that wait by design

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.headers.get("Upgrade", "").lower() == "websocket" or request.path.endswith(self._listening):
            return await handler(request)
        self.calls += 1
        try:
            return await handler(request)
        finally:
            self.calls -= 1
