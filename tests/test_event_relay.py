"""The replicas' event relay (gateway/http/event_relay.py) against a real PostgreSQL database."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.clock import ManualClock
from gateway.http import event_relay
from gateway.http.event_relay import EventRelay
from gateway.http.events import EventBus
from gateway.store.engine import create_engine
from gateway.store.repo import ConversationRef, Store
from gateway.store.stream_events import StreamEvents

from .conftest import pg_database, wait_for
from .support.loop_timers import timers_set_from, waits_on
from .test_store_driver import START

pytestmark = pytest.mark.postgres


async def _web_conversation(engine: AsyncEngine) -> tuple[Store, ConversationRef]:
    store = Store(engine, clock=ManualClock(START))
    conv = await store.create_conversation(ConversationRef("", "web:local:c1", "web", "web", "local", "c1", None, "dm"))
    return store, conv


async def _rows(engine: AsyncEngine) -> int:
    """Events in the table other replicas read."""
    async with engine.connect() as c:
        return int((await c.execute(text("SELECT count(*) FROM stream_events"))).scalar_one())


class HeldAfterCommit(StreamEvents):
    """The table as it is, but its first write's answer is late: committed, not yet returned (a slow
    network), as a stop's cancel can find it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.committed, self.answer = asyncio.Event(), asyncio.Event()

    async def append(self, origin: str, events: Sequence[tuple[str, str]]) -> None:
        await super().append(origin, events)
        if not self.committed.is_set():
            self.committed.set()
            await self.answer.wait()


async def test_a_stop_during_a_committed_write_writes_no_event_twice() -> None:
    """A stop cancelled the relay's writer while its write was in flight; the batch went back in the
    queue and the stop wrote it again: a browser on another replica saw the run's final twice."""
    async with pg_database() as url:
        engine = create_engine(url)
        try:
            store, conv = await _web_conversation(engine)
            table = HeldAfterCommit(engine)
            relay = EventRelay(engine, store, EventBus(), table=table)
            await relay.start()
            relay.send(conv.id, {"type": "final", "message_id": 1, "text": "Done."})
            await asyncio.wait_for(table.committed.wait(), 10)
            stopping = asyncio.create_task(relay.stop())
            await asyncio.sleep(0.05)  # the stop has cancelled the writer loop by now
            table.answer.set()
            await asyncio.wait_for(stopping, 10)

            assert await _rows(engine) == 1
        finally:
            await engine.dispose()


async def test_a_write_the_database_refused_is_written_when_it_answers_again() -> None:
    """An error from the database puts the batch back: nothing lost, nothing doubled."""
    async with pg_database() as url:
        engine = create_engine(url)
        try:
            store, conv = await _web_conversation(engine)

            class RefusedOnce(StreamEvents):
                refused = False

                async def append(self, origin: str, events: Sequence[tuple[str, str]]) -> None:
                    if not self.refused:
                        self.refused = True
                        raise ConnectionError("the database went away")
                    await super().append(origin, events)

            relay = EventRelay(engine, store, EventBus(), table=RefusedOnce(engine))
            await relay.start()
            relay.send(conv.id, {"type": "final", "message_id": 1, "text": "Done."})

            await wait_for(lambda: _rows(engine), timeout=30, what="the refused batch written")
            await relay.stop()
            assert await _rows(engine) == 1
        finally:
            await engine.dispose()


async def test_an_idle_replica_reads_nothing_until_a_browser_watches() -> None:
    """With no browser watching here, the relay's reader waits for one (it read every 5 s, each read
    returning at once); the first `watch` starts its safety read again."""
    async with pg_database() as url:
        engine = create_engine(url)
        relay: EventRelay | None = None
        try:
            store, conv = await _web_conversation(engine)
            relay = EventRelay(engine, store, EventBus())
            with timers_set_from(os.path.dirname(event_relay.__file__)) as made:
                await relay.start()
                await wait_for(lambda: relay.listening, what="the relay listening")
                reader = next(t for t in relay._tasks if t.get_name() == "relay:read")
                await wait_for(lambda: waits_on(reader, "EventRelay._read_forever", "Event.wait"),
                               what="the reader waiting")
                assert [m for m in made if m.endswith(":_read_forever")] == [], "an unwatched relay polled"

                await relay.watch(conv.id)
                await wait_for(lambda: [m for m in made if m.endswith(":_read_forever")],
                               what="the safety read started by the first watch")
        finally:
            if relay is not None:
                await relay.stop()
            await engine.dispose()
