"""Slow clients cannot hold the server: a request head and a body each get a deadline.

- The head: aiohttp arms its keep-alive timer when a connection opens and again after each
  answer, and on expiry closes a connection still waiting for a complete request head, however
  many bytes trickled in meanwhile (bytes do not re-arm it). So `keepalive_timeout` *is* the
  head timeout: the runner is built with `http.header_timeout_seconds` (`runner_options`).
- The body: a handler waits for body bytes in aiohttp's StreamReader, which wraps each wait in
  its `_timer` context (the client side's read timeout uses the same hook). `middleware` gives
  every request's body a timer that fires when no byte arrived for `http.body_timeout_seconds`;
  the request is answered 408 and its connection closed. Only waits for the client's bytes
  are timed, never the handler's own work or a long event stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from aiohttp import web
from aiohttp.helpers import BaseTimerContext

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger("gateway.http.slow_clients")


def runner_options(header_timeout: float) -> dict[str, Any]:
    """AppRunner keyword arguments: close a connection that sends no whole head within the timeout."""
    return {"keepalive_timeout": header_timeout}


class BodyStalled(asyncio.TimeoutError):
    """No byte of the request body arrived within the body timeout.

    A TimeoutError, so that aiohttp's own drain of a body the handler did not read (its
    "lingering" after the answer) takes it as the end of waiting and closes the connection."""


class _StallTimer(BaseTimerContext):
    """Wraps one wait for body bytes: cancels the waiting task if nothing arrives in time."""

    def __init__(self, seconds: float) -> None:
        self._seconds = seconds
        self._handle: asyncio.TimerHandle | None = None
        self._fired = False

    def __enter__(self) -> BaseTimerContext:
        task = asyncio.current_task()
        assert task is not None
        self._fired = False
        self._handle = asyncio.get_running_loop().call_later(self._seconds, self._fire, task)
        return self

    def _fire(self, task: asyncio.Task[Any]) -> None:
        self._fired = True
        task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._fired and exc_type is asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            raise BodyStalled from None


def middleware(body_timeout: float) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    @web.middleware
    async def body_deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists:
            request.content._timer = _StallTimer(body_timeout)  # type: ignore[attr-defined]
        try:
            return await handler(request)
        except BodyStalled:
            log.info("%s %s: the body stalled for %ss; closing", request.method, request.path[:200], body_timeout)
            response = web.json_response({"error": "request_timeout",
                                          "message": f"no part of the body arrived for {body_timeout:g}s"},
                                         status=408, headers={"Connection": "close"})
            # Answered here and the connection closed at once: left to aiohttp, it would wait
            # (its lingering time) for the rest of a body that is not coming.
            await response.prepare(request)
            await response.write_eof()
            request.protocol.force_close()
            return response

    return body_deadline
