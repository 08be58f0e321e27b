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
from gateway.store.repo import ConversationRef, Duplicate, FinalRow, Identity, Ingested, Line, QueueFull, Store

from .conftest import database_url, wait_for

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


@pytest.mark.parametrize("kind", ENGINES)
async def test_nulls_long_text_and_files_json_are_stored_alike(kind: str, tmp_path: Path) -> None:
    """No platform message id, no thread, an empty name, a NUL in the text, a text of a megabyte, a files JSON
    full of colons and quotes (`:name` must stay data, never a parameter), in a new conversation and an old."""
    async with _replicas(kind, tmp_path, 1) as (a,):
        files = '[{"name": ":t :c", "url": "https://x/a:b?c=\'d\'"}]'
        big = "x" * 1_000_000 + "\x00end"
        nameless = Identity("person-ann", "")
        first = await a.ingest(binding_id="web", event_ids=["e1"], conversation=_new(), identity=nameless,
                               account_id="ann", text=big, agent_id="assistant", platform_message_id=None,
                               queue_limit=10, files=files, start=True)
        assert first.claimed is not None and first.claimed.files
        await a.end_run(first.run_id, "finished", reply=":text ::text", deliveries=[FinalRow(0, None, ":pm0")])
        second = await a.ingest(binding_id="web", event_ids=["e2"], conversation=first.conversation,
                                identity=nameless, account_id="ann", text="", agent_id="assistant",
                                platform_message_id=None, queue_limit=10, files=files, start=True)
        assert second.claimed is not None
        assert [(x.role, x.text[-4:], x.sender_name) for x in second.claimed.history] == [
            ("user", "\ufffdend", ""), ("assistant", "text", "")]
        for said in (first, second):
            assert await a.capability_state.get("attachments", f"run:{said.run_id}",
                                                f"{said.message_id:012d}") == files
        stored = await _rows(a, "SELECT length(text), platform_message_id, sender_name FROM messages ORDER BY id")
        assert stored == [(1_000_004, None, ""), (12, None, ""), (0, None, "")]
        assert [(d.seq, d.platform_message_id, d.text) for d in await a.deliveries(first.run_id)] == [(0, None, ":pm0")]


@pytest.mark.parametrize("kind", ENGINES)
async def test_a_parked_runs_ends_each_retried_are_recorded_once(kind: str, tmp_path: Path) -> None:
    async with _replicas(kind, tmp_path, 1) as (a,):
        said = await _say(a, _new(), "e1", "deploy", start=True)
        conv = said.conversation
        for _ in range(2):
            await a.end_run(said.run_id, "parked", state="[]", reply="Asking.", usage=(1, 1, 1))
        _clock(a).advance(5)
        await a.end_run(said.run_id, "queued", state="[]")  # the card decided: back in the queue (not fresh)
        resumed = await a.claim_next_run(conv.id)
        assert resumed is not None and not resumed.fresh
        _clock(a).advance(5)
        for _ in range(2):
            await a.end_run(said.run_id, "finished", reply="Done.", usage=(2, 2, 2),
                            deliveries=[FinalRow(0, "m-1", "Asking."), FinalRow(1, "m-2", "Done.")])
        answers = [(m.text, m.status, m.created_at) for m in await a.messages(conv.id) if m.role == "assistant"]
        assert answers == [("Asking.", "final", START), ("Done.", "final", START + timedelta(seconds=10))]
        run = await a.run(said.run_id)
        assert run is not None and run.status == "finished" and run.requests == 2
        assert run.finished_at == START + timedelta(seconds=10)


@pytest.mark.postgres
@pytest.mark.parametrize("rows", [[FinalRow(0, "m-1", "Done.")], [FinalRow(0, "m-1", "Do"), FinalRow(0, None, "Done.")]],
                         ids=["one statement", "statements one by one"])
async def test_an_end_retried_while_its_first_try_is_still_committing_adds_its_reply_once(
        rows: list[FinalRow], tmp_path: Path) -> None:
    """`patiently` tries an end again when the first try's answer was lost with its connection; that try may
    still be committing on the server (a slow fsync) when the second one reads the run's row. The second
    waits for the first's lock on the row and then changes nothing: its reply must not be added either."""
    async with _replicas("postgresql", tmp_path, 1) as (a,):
        said = await _say(a, _new(), "e1", "hi", start=True)
        committing, go_on = asyncio.Event(), asyncio.Event()
        original = driver._AsyncpgTx.run, driver._AsyncpgTx.one
        first_try: list[asyncio.Task[None]] = []  # the first try's task, once started

        def held(call: Any) -> Any:
            async def step(tx: driver._AsyncpgTx, sql: str, **params: Any) -> Any:
                result = await call(tx, sql, **params)
                # The first try's writes are done and its transaction open: its COMMIT is on its way.
                if asyncio.current_task() in first_try and "UPDATE runs" in sql:
                    committing.set()
                    await go_on.wait()
                return result
            return step

        driver._AsyncpgTx.run = held(original[0])  # type: ignore[method-assign]
        driver._AsyncpgTx.one = held(original[1])  # type: ignore[method-assign]
        try:
            first = asyncio.create_task(a.end_run(said.run_id, "finished", reply="Done.", deliveries=rows))
            first_try.append(first)
            await committing.wait()
            retry = asyncio.create_task(a.end_run(said.run_id, "finished", reply="Done.", deliveries=rows))
            import asyncpg

            watcher = await asyncpg.connect(str(a.engine.url).replace("postgresql+asyncpg", "postgresql"))
            try:
                async def waits() -> bool:
                    return retry.done() or bool(await watcher.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock'"))
                await wait_for(waits, what="the retry to wait on the first try's lock")
            finally:
                await watcher.close()
            go_on.set()
            await asyncio.wait_for(asyncio.gather(first, retry), 30)
        finally:
            driver._AsyncpgTx.run, driver._AsyncpgTx.one = original  # type: ignore[method-assign]
        replies = [m.text for m in await a.messages(said.conversation.id) if m.role == "assistant"]
        assert replies == ["Done."], "the retried end added its reply again"
        assert [(d.seq, d.platform_message_id, d.text) for d in await a.deliveries(said.run_id)] == [(0, "m-1", "Done.")]
