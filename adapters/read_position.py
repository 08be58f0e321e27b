"""Where a binding has read its platform's stream to, kept in the store across restarts.

Telegram's update offset and Mattermost's websocket read position are the same thing: a value
advanced after every event taken, and read back at the next start so nothing is replayed or
skipped. Advancing only sets it in memory; a task of its own writes it to the store
(`dispatcher.set_state`), at most once every `every` seconds by the gateway's clock, so the next
event never waits for a store write (and a store that is busy slows the saving, not the reading).
`close` writes what is left. A kill loses at most `every` seconds of position: both platforms'
events read again are dropped by the inbound ledger.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.clock import Clock
from gateway.outbound.adapter import Dispatcher
from gateway.tasks import cancel_and_wait


class ReadPosition:
    def __init__(self, dispatcher: Dispatcher, binding_id: str, key: str, *, clock: Clock, every: float,
                 log: logging.Logger) -> None:
        self._dispatcher, self._binding_id, self.key = dispatcher, binding_id, key
        self._clock, self._every, self._log = clock, every, log
        self.value: str | None = None  # the position read to, in memory
        self._saved: str | None = None  # as last written to (or read from) the store
        self._tried_at = float("-inf")  # the clock's monotonic time of the last write tried
        self._changed = asyncio.Event()
        self._saver: asyncio.Task[None] | None = None

    async def load(self) -> str | None:
        """The stored position (None the first time), and start saving what is advanced."""
        self.value = self._saved = await self._dispatcher.get_state(self._binding_id, self.key)
        if self._saver is None:
            self._saver = asyncio.create_task(self._save_forever(), name=f"read-position:{self.key}")
        return self.value

    def advance(self, value: str) -> None:
        """Read up to `value`: written to the store soon, off the caller's path."""
        self.value = value
        if value != self._saved:
            self._changed.set()

    async def flush(self) -> None:
        """Write the position now if it moved; a failure is logged and tried again later."""
        value = self.value
        if value is None or value == self._saved:
            return
        self._tried_at = self._clock.monotonic()
        try:
            await self._dispatcher.set_state(self._binding_id, self.key, value)
        except Exception as e:  # the next save (or the ledger, after a restart) covers it
            self._log.warning("could not save the read position %s=%s: %s", self.key, value, e)
            return
        self._saved = value

    async def close(self) -> None:
        """Stop saving in the background and write what is left."""
        if self._saver is not None:
            await cancel_and_wait(self._saver)
            self._saver = None
        await self.flush()

    async def _save_forever(self) -> None:
        while True:
            await self._changed.wait()
            self._changed.clear()
            wait = self._tried_at + self._every - self._clock.monotonic()
            if wait > 0:
                await self._clock.sleep(wait)
            await self.flush()
            if self.value != self._saved:  # moved while the write was in flight, or it failed
                self._changed.set()
