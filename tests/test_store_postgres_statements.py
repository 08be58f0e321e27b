"""Attempts to break `Store.ingest` and `Store.end_run` where PostgreSQL writes several rows in one statement
(data-modifying CTEs, gateway/store/repo.py `_pg_insert_sql`, `_pg_end_sql`) and SQLite runs the statements one
by one: the two programs must leave the same rows, and keep the store's promises across replicas."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gateway.clock import ManualClock
from gateway.store import driver
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import ConversationRef, Duplicate, FinalRow, Identity, Line, QueueFull, Store

from .conftest import database_url
from .test_store_driver import until_a_lock_is_waited_for

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
ANN = Identity("person-ann", "Ann")
ENGINES = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@contextlib.asynccontextmanager
async def _replicas(kind: str, directory: Path, n: int = 2) -> AsyncIterator[list[Store]]:
    """`n` stores on one fresh database, each on an engine and a clock of its own (on PostgreSQL: replicas)."""
    async with database_url(kind, directory) as url, contextlib.AsyncExitStack() as stack:
        stores = []
        for _ in range(n):
            engine = create_engine(url)
            stack.push_async_callback(engine.dispose)
            stores.append(Store(engine, clock=ManualClock(START)))
        await migrate(stores[0].engine)
        yield stores


def _new(key: str = "c1") -> ConversationRef:
    return ConversationRef("", f"web:local:{key}", "web", "web", "local", key, None, "dm")


def _say(store: Store, conv: ConversationRef, event: str, text: str, *, start: bool = False, limit: int = 10,
         files: str | None = None) -> Any:
    return store.ingest(binding_id="web", event_ids=[event], conversation=conv, identity=ANN, account_id="ann",
                        text=text, agent_id="assistant", platform_message_id=event, queue_limit=limit, files=files,
                        start=start)


def _clock(store: Store) -> ManualClock:
    assert isinstance(store.clock, ManualClock)
    return store.clock


async def _rows(store: Store, sql: str, **params: Any) -> list[driver.Row]:
    return await driver.read(store.engine, lambda q: (yield q.all(sql, **params)))  # type: ignore[no-any-return]


@pytest.mark.parametrize("kind", ENGINES)
async def test_two_replicas_ingesting_into_one_new_conversation_make_one_and_start_one_run(
        kind: str, tmp_path: Path) -> None:
    """Both replicas meet the key for the first time (`joined` on PostgreSQL: the conversation's row in the
    statement with the run's and the message's). The second finds the key taken and stores nothing of its
    own statement: its message goes into the first's conversation, queued behind the run started there."""
    async with _replicas(kind, tmp_path) as (a, b):
        got = await asyncio.gather(_say(a, _new(), "e1", "from a", start=True),
                                   _say(b, _new(), "e2", "from b", start=True))
        first, second = sorted(got, key=lambda i: i.claimed is None)
        assert first.conversation == second.conversation
        assert first.claimed is not None and second.claimed is None and second.new_run
        conversations = await _rows(a, "SELECT id, key FROM conversations")
        assert conversations == [(first.conversation.id, "web:local:c1")]
        runs = await _rows(a, "SELECT id, status FROM runs ORDER BY status")
        assert runs == [(second.run_id, "queued"), (first.run_id, "running")]
        messages = await _rows(a, "SELECT conversation_id, run_id, status FROM messages ORDER BY id")
        assert sorted(messages) == sorted([(first.conversation.id, first.run_id, "processing"),
                                           (first.conversation.id, second.run_id, "queued")])
        # The same event at both replicas: answered once, wherever it lands.
        again = await asyncio.gather(_say(a, _new("c2"), "e3", "once", start=True),
                                     _say(b, _new("c2"), "e3", "once", start=True), return_exceptions=True)
        assert sorted(type(x).__name__ for x in again) == ["Duplicate", "Ingested"]
        assert await _rows(a, "SELECT count(*) FROM messages WHERE text = 'once'") == [(1,)]
        assert await _rows(a, "SELECT count(*) FROM conversations") == [(2,)]


@pytest.mark.parametrize("kind", ENGINES)
async def test_a_full_queue_met_by_a_replica_new_to_the_conversation_stores_nothing(kind: str, tmp_path: Path) -> None:
    """Replica b has never seen the conversation: its statement with the conversation's row finds the key
    taken, then the queue full. Nothing is kept, not the ledger row either: the retry is accepted later."""
    async with _replicas(kind, tmp_path) as (a, b):
        first = await _say(a, _new(), "e1", "one", limit=1)
        with pytest.raises(QueueFull):
            await _say(b, _new(), "e2", "two", limit=1, files='[{"name": "a.png"}]')
        assert await _rows(a, "SELECT event_id FROM inbound_ledger ORDER BY event_id") == [("e1",)]
        assert await _rows(a, "SELECT count(*) FROM runs") == [(1,)]
        assert await _rows(a, "SELECT count(*) FROM capability_state") == [(0,)]
        assert await a.claim_next_run(first.conversation.id) is not None
        retried = await _say(b, _new(), "e2", "two", limit=1, files='[{"name": "a.png"}]')
        assert retried.conversation == first.conversation and retried.new_run
        with pytest.raises(Duplicate):
            await _say(a, first.conversation, "e2", "two", limit=1)


async def _turns(store: Store, conv: ConversationRef, n: int) -> None:
    """`n` earlier turns, a second apart, as history reads them (final, not of a live run)."""
    for i in range(n):
        await store.add_message(conv.id, "user" if i % 2 == 0 else "assistant", f"t{i}")
        _clock(store).advance(1)


@pytest.mark.parametrize("kind", ENGINES)
@pytest.mark.parametrize("turns", [200, 201])
@pytest.mark.parametrize("skew", ["ahead", "tied with the oldest kept", "behind"])
async def test_a_run_started_at_ingest_reads_the_200_newest_turns_wherever_its_message_sorts(
        kind: str, turns: int, skew: str, tmp_path: Path) -> None:
    """At the history's real bound (HISTORY_MESSAGES = 200), with the ingesting replica's clock ahead of the
    turns (its message takes a place), equal to the oldest turn kept (the id decides: the new message is
    newer) or behind them all (it takes none): what claim_next_run reads after an ingest of its own."""
    async with _replicas(kind, tmp_path) as (a, b):
        conv = await a.create_conversation(_new())
        await _turns(a, conv, turns)
        oldest_kept = START + timedelta(seconds=turns - 200)
        b.clock = ManualClock(START + timedelta(seconds=turns) if skew == "ahead" else
                              oldest_kept if skew == "tied with the oldest kept" else START - timedelta(days=1))
        said = await _say(b, conv, "e1", "now", start=True)
        assert said.claimed is not None
        texts = [line.text for line in said.claimed.history]
        newest = [f"t{i}" for i in range(turns)]
        assert texts == (newest[-200:] if skew == "behind" else newest[-199:])
        assert said.claimed.prompt == [Line("user", "now", "Ann")]


@pytest.mark.postgres
@pytest.mark.parametrize("rows", [[], [FinalRow(0, "m-1", "Done.")]], ids=["no delivery rows", "a delivery row"])
async def test_an_end_retried_while_its_first_try_is_still_committing_adds_its_reply_once(
        rows: list[FinalRow], tmp_path: Path) -> None:
    """`patiently` tries an end again when the first try's answer was lost with its connection; that try may
    still be committing on the server (a slow fsync) when the second one reads the run's row. The second
    waits for the first's locks and then changes nothing: its reply must not be added either. (One statement's
    snapshot is taken at its start, before that wait: the reply was read off the run's row as it was before.)"""
    async with _replicas("postgresql", tmp_path, 1) as (a,):
        said = await _say(a, _new(), "e1", "hi", start=True)
        committing, go_on = asyncio.Event(), asyncio.Event()
        original = driver._AsyncpgTx.one
        first_try: list[asyncio.Task[None]] = []  # the first try's task, once started

        async def held(tx: driver._AsyncpgTx, sql: str, **params: Any) -> driver.Row | None:
            row = await original(tx, sql, **params)
            if asyncio.current_task() in first_try:  # its writes done, its transaction open: COMMIT on its way
                committing.set()
                await go_on.wait()
            return row

        driver._AsyncpgTx.one = held  # type: ignore[method-assign]
        try:
            first = asyncio.create_task(a.end_run(said.run_id, "finished", reply="Done.", deliveries=rows))
            first_try.append(first)
            await committing.wait()
            retry = asyncio.create_task(a.end_run(said.run_id, "finished", reply="Done.", deliveries=rows))
            await until_a_lock_is_waited_for(a.engine.url.render_as_string(hide_password=False), retry.done,
                                             "the retry to wait on the first try's lock")
            go_on.set()
            await asyncio.wait_for(asyncio.gather(first, retry), 30)
        finally:
            driver._AsyncpgTx.one = original  # type: ignore[method-assign]
        replies = [m.text for m in await a.messages(said.conversation.id) if m.role == "assistant"]
        assert replies == ["Done."], "the retried end added its reply again"
        assert [(d.seq, d.platform_message_id, d.text) for d in await a.deliveries(said.run_id)] == [
            (d.seq, d.platform_message_id, d.text) for d in rows]
        assert [m.status for m in await a.messages(said.conversation.id)] == ["processed", "final"]
