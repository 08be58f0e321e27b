"""The web chat's event stream across replicas on one PostgreSQL database.

A browser's stream (SSE) is served by whichever replica it reached, but the run it watches may
execute on another. Each replica therefore:

- writes the events it publishes for web conversations to `stream_events`, in batches: deltas
  of one message are merged and written at most every `DELTA_EVERY` seconds (a browser on
  another replica sees the reply grow in steps, not token by token), anything else at once;
  each batch NOTIFYs the conversations it touched;
- LISTENs on a connection of its own (asyncpg, through SQLAlchemy's driver connection) and,
  for a conversation one of its browsers watches, reads the new rows other replicas wrote and
  hands them to its local listeners. Its own events are never read back (no duplicates: the
  local listeners had them at once).

Reading is one path whatever woke it: a notification, the poll every `POLL_WHILE_DOWN` seconds
while the LISTEN connection is down (reconnecting with backoff), or the slow safety poll; while no
browser here watches a conversation there is nothing to read, and no poll either, until one does. Each
read takes every row since the previous read began (by the database's clock, with a margin for
transactions still committing), skipping ids already shown: so after a dropped connection the
first read catches up on everything missed, in order.

SQLite has no relay: its file belongs to one process, so there is no other replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store.stream_events import CHANNEL, StreamEvents
from gateway.tasks import cancel_and_wait

if TYPE_CHECKING:
    from gateway.http.events import EventBus
    from gateway.store.repo import Store

log = logging.getLogger(__name__)

DELTA_EVERY = 0.25  # seconds between writes of a growing reply's text
POLL_WHILE_DOWN = 1.0  # seconds between reads while LISTEN is down
SAFETY_POLL = 5.0  # seconds between reads while LISTEN is up (a notification is never relied on alone)
MARGIN = timedelta(seconds=2)  # a row stamped before a read began may commit just after it
PING_EVERY = 5.0  # a LISTEN connection that silently died is noticed within this
KEEP = timedelta(minutes=10)  # rows older than this are deleted (a browser that was away re-reads the conversation)
PRUNE_EVERY = 60.0
MAX_PENDING = 10_000  # events waiting to be written while the database is unreachable


class EventRelay:
    def __init__(self, engine: AsyncEngine, store: Store, bus: EventBus, *, table: StreamEvents | None = None) -> None:
        self._engine = engine
        self._table = table or StreamEvents(engine)
        self._store = store
        self._bus = bus
        self.origin = store.owner
        # Writing.
        self._pending: list[tuple[str, dict[str, Any]]] = []
        self._has_pending = asyncio.Event()
        self._urgent = asyncio.Event()
        self._writing: asyncio.Task[None] | None = None  # the batch being written (see `_write`)
        # Reading.
        self._wake = asyncio.Event()
        self._watch_from: dict[str, datetime] = {}  # conversation -> when its first local listener came
        self._after: datetime | None = None  # rows after this (minus MARGIN) are still to read
        self._shown: dict[int, datetime] = {}  # ids delivered (or skipped) lately, with their stamp
        self.listening = False
        self.reconnects = 0
        self._tasks: list[asyncio.Task[None]] = []

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._write_forever(), name="relay:write"),
            asyncio.create_task(self._listen_forever(), name="relay:listen"),
            asyncio.create_task(self._read_forever(), name="relay:read"),
            asyncio.create_task(self._prune_forever(), name="relay:prune"),
        ]

    async def stop(self) -> None:
        await cancel_and_wait(*self._tasks)  # the writer's batch in flight goes on (see `_write`)
        self._tasks = []
        try:
            async with asyncio.timeout(2.0):
                await self._write()  # the last events of runs that finished in the grace period
        except Exception as e:  # the daemon stops either way; say what a browser on another replica misses
            log.warning("the event stream's last %d events were not written: %s: %s", len(self._pending),
                        type(e).__name__, e)
        finally:  # a write that outlived the grace is not left running (a failed one was reported above)
            if self._writing is not None and not self._writing.done():
                await cancel_and_wait(self._writing)

    def state(self) -> dict[str, Any]:
        """For /readyz: whether notifications arrive, or the store is being polled meanwhile."""
        return {"mode": "listening" if self.listening else "polling", "reconnects": self.reconnects}

    # --- writing what this replica publishes -----------------------------------------------

    def send(self, conversation_id: str, event: dict[str, Any]) -> None:
        """Queue an event for the other replicas. A delta following a delta of the same message
        replaces it (the browser draws each delta's full `text`)."""
        is_delta = event.get("type") == "delta"
        if not is_delta:
            self._urgent.set()
        elif self._pending:
            last_conv, last = self._pending[-1]
            if last_conv == conversation_id and last.get("type") == "delta" and last.get("message_id") == event.get(
                    "message_id"):
                merged = dict(event)
                if "delta" in last and "delta" in event:
                    merged["delta"] = last["delta"] + event["delta"]
                else:
                    merged.pop("delta", None)
                self._pending[-1] = (conversation_id, merged)
                return
        if len(self._pending) >= MAX_PENDING:
            del self._pending[0]
        self._pending.append((conversation_id, event))
        self._has_pending.set()

    async def _write_forever(self) -> None:
        while True:
            await self._has_pending.wait()
            # A growing reply waits a moment so its deltas merge; anything else goes at once.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(DELTA_EVERY):
                    await self._urgent.wait()
            try:
                await self._write()
            except Exception as e:
                log.warning("could not share live events with other replicas (%s); retrying", e)
                await asyncio.sleep(POLL_WHILE_DOWN)

    async def _write(self) -> None:
        """Write what is pending, after the write in flight (if any) ends.

        A write runs in a task of its own that cancelling its caller does not cancel: a cancel
        landing after the database committed but before the await returned would leave no way to
        tell a written batch from a lost one, and writing it again shows other replicas' browsers
        each event twice. So `stop` cancels the writer loop, lets its write finish, then writes the
        rest. A write that fails (an error the database reported) put its batch back in front.
        """
        if self._writing is not None and not self._writing.done():
            with contextlib.suppress(Exception):  # a failed batch is pending again: written below
                await asyncio.shield(self._writing)
        if not self._pending:
            return
        self._writing = asyncio.create_task(self._write_pending(), name="relay:write batch")
        await asyncio.shield(self._writing)

    async def _write_pending(self) -> None:
        self._has_pending.clear()
        self._urgent.clear()
        batch, self._pending = self._pending, []
        try:
            rows = [(conv, json.dumps(event, separators=(",", ":"))) for conv, event in batch
                    if await self._is_web(conv)]
            await self._table.append(self.origin, rows)
        except Exception:  # not a cancellation: only a stop past its grace cancels, and may have committed
            self._pending[:0] = batch  # nothing lost: the next write takes them first
            self._has_pending.set()
            raise

    async def _is_web(self, conversation_id: str) -> bool:
        """Only web conversations have streams; a Slack run's run_end concerns no browser."""
        conv = await self._store.conversation(conversation_id)
        return conv is not None and conv.platform == "web"

    # --- reading what other replicas publish ----------------------------------------------

    async def watch(self, conversation_id: str) -> None:
        """A local listener opened this conversation's stream: show what is published from now."""
        try:
            now = await self._table.now()
        except Exception as e:  # the database's clock is better (replicas agree on it); ours will do
            log.debug("watching from this process's clock: the database's is unavailable: %s", e)
            now = datetime.now().astimezone()
        if not self._watch_from:
            self._wake.set()  # the first listener: the reader waited on nothing, its safety read starts now
        self._watch_from.setdefault(conversation_id, now)
        if self._after is None:
            self._after = now

    def unwatch(self, conversation_id: str) -> None:
        self._watch_from.pop(conversation_id, None)
        if not self._watch_from:
            self._after = None
            self._shown.clear()

    def _notified(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        origin, _, conversation_id = payload.partition(" ")
        if origin != self.origin and conversation_id in self._watch_from:
            self._wake.set()

    async def _read_forever(self) -> None:
        while True:
            # With no local listener a read has nothing to do (`read` returns at once), so nothing is polled
            # until `watch` wakes it: an idle replica's loop is not woken every 5 s for nothing.
            period = None if not self._watch_from else SAFETY_POLL if self.listening else POLL_WHILE_DOWN
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(period):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.read()
            except Exception as e:
                log.warning("could not read live events of other replicas (%s); retrying", e)

    async def read(self) -> None:
        """Deliver to local listeners every event other replicas wrote since the last read."""
        if not self._watch_from or self._after is None:
            return
        watched = dict(self._watch_from)
        after = max(self._after - MARGIN, min(watched.values()) - MARGIN)
        skip = [i for i, stamp in self._shown.items() if stamp > after]
        now, rows = await self._table.since(self.origin, watched, after, skip)
        self._after = now
        for row in rows:
            self._shown[row.id] = row.created_at
            if row.created_at >= watched[row.conversation_id]:
                self._bus.deliver(row.conversation_id, json.loads(row.body))
        cut = now - 2 * MARGIN
        self._shown = {i: stamp for i, stamp in self._shown.items() if stamp > cut}

    async def _listen_forever(self) -> None:
        backoff = 0.5
        while True:
            try:
                await self._listen_once()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("LISTEN for live events failed (%s); polling the store meanwhile", e)
            self.listening = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)
            self.reconnects += 1

    async def _listen_once(self) -> None:
        """Hold one connection that LISTENs until it drops. A pool connection of our engine,
        used through its driver (asyncpg) since SQLAlchemy has no notification API."""
        async with self._engine.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            lost = asyncio.Event()
            try:
                driver.add_termination_listener(lambda _c: lost.set())
                # Named, so an operator sees it in pg_stat_activity (and does not mistake it for a leak).
                await driver.execute(f"SET application_name = 'agent-gateway listen {self.origin}'")
                await driver.add_listener(CHANNEL, self._notified)
                self.listening = True
                self._wake.set()  # catch up on what was written while we were not listening
                while not lost.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(PING_EVERY):
                            await lost.wait()
                    if not lost.is_set():
                        async with asyncio.timeout(PING_EVERY):
                            await driver.execute("SELECT 1")  # a half-open socket shows here
                log.warning("the LISTEN connection for live events closed; reconnecting")
            finally:
                self.listening = False
                await conn.invalidate()  # never back into the pool: it holds our LISTEN

    async def _prune_forever(self) -> None:
        while True:
            await asyncio.sleep(PRUNE_EVERY)
            try:
                await self._table.prune(KEEP)
            except Exception as e:
                log.warning("could not prune live events (%s)", e)


__all__ = ["EventRelay"]
