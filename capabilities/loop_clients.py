"""HTTP clients kept for the daemon's life, one per key, each usable only on the loop it was made on.

A pooled client (httpx, the openai SDK's) belongs to the event loop that opened it: a client made
under another loop (a test's, a CLI's) is built anew rather than reused, and at stop only the clients
of the stopping loop are closed (one of a loop that has ended went with it). web_search's clients and
the audio clients are both kept this way.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

C = TypeVar("C")


class LoopClients(Generic[C]):
    """`get(key, build)`: the client for `key` on this loop, built on first use; `stop()` closes them."""

    def __init__(self, close: Callable[[C], Awaitable[object]],
                 usable: Callable[[C], bool] = lambda client: True) -> None:
        self._close, self._usable = close, usable
        self._clients: dict[Hashable, tuple[asyncio.AbstractEventLoop, C]] = {}

    def get(self, key: Hashable, build: Callable[[], C]) -> C:
        loop = asyncio.get_running_loop()
        held = self._clients.get(key)
        if held is not None and held[0] is loop and self._usable(held[1]):
            return held[1]
        client = build()
        self._clients[key] = (loop, client)
        return client

    async def stop(self) -> None:
        held, self._clients = self._clients, {}
        loop = asyncio.get_running_loop()
        for client_loop, client in held.values():
            if client_loop is loop:  # a client of a loop that has ended went with it
                with contextlib.suppress(Exception):
                    await self._close(client)
