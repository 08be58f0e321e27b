"""HTTP clients kept for the daemon's life, one per key, each usable only on the loop it was made on.

A pooled client (httpx, the openai SDK's) belongs to the event loop that opened it: a client made
under another loop (a test's, a CLI's) is built anew rather than reused, and at stop only the clients
of the stopping loop are closed (one of a loop that has ended went with it). web_search's clients and
the audio clients are both kept this way.

A client is keyed by its config and its key's digest, so a rotated key (a secret file replaced, an
environment changed by a reload) gets a client of its own; a config (its `family`) keeps only its newest.
A reload tells which configs the new generation names (`keep`): the clients of the others are closed.
One rule for both: a client retired so is closed once nobody draws through it (`lease`), so a run still
drawing through it finishes; a run of an old generation that draws later gets a client of its own, closed
when that draw ends, so a config no generation names never stays open until stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

C = TypeVar("C")


@dataclass(eq=False)
class _Held(Generic[C]):
    loop: asyncio.AbstractEventLoop
    client: C
    drawing: int = 0  # leases out now
    retired: bool = False  # closed when the last lease ends
    closed: bool = False


class LoopClients(Generic[C]):
    """`get(key, build)` or `lease(key, build, family)`: the client for `key` on this loop, built on first
    use; `keep(families)` retires the others' clients; `stop()` closes them all."""

    def __init__(self, close: Callable[[C], Awaitable[object]],
                 usable: Callable[[C], bool] = lambda client: True) -> None:
        self._close, self._usable = close, usable
        self._clients: dict[Hashable, _Held[C]] = {}
        self._newest: dict[Hashable, Hashable] = {}  # family -> its newest key
        self._named: set[Hashable] | None = None  # the families the config names; None before a reload says
        self._closing: set[asyncio.Task[None]] = set()

    def get(self, key: Hashable, build: Callable[[], C]) -> C:
        """A client for callers that never retire one (no family): kept until stop."""
        return self._held(key, build).client

    def _held(self, key: Hashable, build: Callable[[], C]) -> _Held[C]:
        loop = asyncio.get_running_loop()
        held = self._clients.get(key)
        if held is None or held.loop is not loop or not self._usable(held.client):
            held = self._clients[key] = _Held(loop, build())
        return held

    @contextlib.asynccontextmanager
    async def lease(self, key: Hashable, build: Callable[[], C], family: Hashable) -> AsyncIterator[C]:
        """The client for `key` while the caller draws through it: not closed before the block ends."""
        held = self._held(key, build)
        before = self._newest.get(family)
        self._newest[family] = key
        if before is not None and before != key:  # a rotated key: the one before it retires
            self._retire(before)
        held.drawing += 1
        try:
            yield held.client
        finally:
            held.drawing -= 1
            if self._named is not None and family not in self._named:  # an old generation's draw
                held.retired = True
                if self._clients.get(key) is held:
                    del self._clients[key]
            self._close_if_free(held)

    def keep(self, families: Iterable[Hashable]) -> None:
        """The families a reload's config names: every other one's clients retire."""
        self._named = set(families)
        for family in [f for f in self._newest if f not in self._named]:
            self._retire(self._newest.pop(family))

    def _retire(self, key: Hashable) -> None:
        held = self._clients.pop(key, None)
        if held is None:
            return
        held.retired = True
        self._close_if_free(held)

    def _close_if_free(self, held: _Held[C]) -> None:
        if held.retired and not held.drawing and not held.closed and held.loop is asyncio.get_running_loop():
            # Closed in the background: the caller (a run about to draw, a reload) does not wait for it.
            held.closed = True
            task = held.loop.create_task(self._quietly_close(held))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def _quietly_close(self, held: _Held[C]) -> None:
        held.closed = True
        with contextlib.suppress(Exception):
            await self._close(held.client)

    async def stop(self) -> None:
        held, self._clients, self._newest, self._named = self._clients, {}, {}, None
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        loop = asyncio.get_running_loop()
        for one in held.values():
            if one.loop is loop and not one.closed:  # a client of a loop that has ended went with it
                await self._quietly_close(one)
