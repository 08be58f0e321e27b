"""HTTP clients kept for the daemon's life, one per key, each usable only on the loop it was made on.

A pooled client (httpx, the openai SDK's) belongs to the event loop that opened it: a client made
under another loop (a test's, a CLI's) is built anew rather than reused, and at stop only the clients
of the stopping loop are closed (one of a loop that has ended went with it). web_search's clients and
the audio clients are both kept this way.

A client is keyed by its config and its key's digest, so a rotated key (a secret file replaced, an
environment changed by a reload) gets a client of its own. The ones before it would stay open until
stop, one more per rotation for the daemon's life: so a key's `family` (its config) keeps its newest
client and the one before (a run may still be drawing through it), and closes any older.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

C = TypeVar("C")


class LoopClients(Generic[C]):
    """`get(key, build)`: the client for `key` on this loop, built on first use; `stop()` closes them."""

    KEPT_PER_FAMILY = 2  # the newest client of a config and the one before it

    def __init__(self, close: Callable[[C], Awaitable[object]],
                 usable: Callable[[C], bool] = lambda client: True) -> None:
        self._close, self._usable = close, usable
        self._clients: dict[Hashable, tuple[asyncio.AbstractEventLoop, C]] = {}
        self._families: dict[Hashable, list[Hashable]] = {}  # family -> its keys, oldest first
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, key: Hashable, build: Callable[[], C], family: Hashable | None = None) -> C:
        loop = asyncio.get_running_loop()
        held = self._clients.get(key)
        if held is not None and held[0] is loop and self._usable(held[1]):
            return held[1]
        client = build()
        self._clients[key] = (loop, client)
        if family is not None:
            self._retire_older(family, key, loop)
        return client

    def _retire_older(self, family: Hashable, key: Hashable, loop: asyncio.AbstractEventLoop) -> None:
        keys = self._families.setdefault(family, [])
        if key in keys:
            keys.remove(key)
        keys.append(key)
        while len(keys) > self.KEPT_PER_FAMILY:
            old = self._clients.pop(keys.pop(0), None)
            if old is not None and old[0] is loop:  # closed in the background: a caller is waiting for its own
                task = loop.create_task(self._quietly_close(old[1]))
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)

    async def _quietly_close(self, client: C) -> None:
        with contextlib.suppress(Exception):
            await self._close(client)

    async def stop(self) -> None:
        held, self._clients, self._families = self._clients, {}, {}
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for client_loop, client in held.values():
            if client_loop is loop:  # a client of a loop that has ended went with it
                await self._quietly_close(client)
