"""The per-message store methods, which run plain SQL on the driver, on SQLite and PostgreSQL.

Their rows must read back through the ORM exactly as the ORM writes them (times in UTC, in
order), and the ledger, the queue limit and leases must behave the same on both engines.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gateway.clock import ManualClock
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import (
    Duplicate,
    Identity,
    Line,
    QueueFull,
    Store,
    ConversationRef,
)

from .conftest import pg_database

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)  # microsecond 0: the text format must keep them
ANN = Identity("person-ann", "Ann")


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
        else:
            url = await stack.enter_async_context(pg_database())
        engine = create_engine(url)
        stack.push_async_callback(engine.dispose)
        await migrate(engine)
        yield Store(engine, clock=ManualClock(START))


async def _conversation(store: Store) -> ConversationRef:
    return await store.create_conversation(
        ConversationRef("", "web:local:c1", "web", "web", "local", "c1", None, "dm")
    )


async def _say(store: Store, conv: ConversationRef, event: str, text: str, limit: int = 10):  # type: ignore[no-untyped-def]
    return await store.ingest(binding_id="web", event_ids=[event], conversation=conv, identity=ANN,
                              account_id="ann", text=text, agent_id="assistant", platform_message_id=event,
                              queue_limit=limit)


def _clock(store: Store) -> ManualClock:
    assert isinstance(store.clock, ManualClock)
    return store.clock


async def test_driver_rows_read_back_through_the_orm_in_order(store: Store) -> None:
    conv = await _conversation(store)
    await _say(store, conv, "e1", "first")
    _clock(store).advance(1.5)
    await store.add_message(conv.id, "notice", "written by the ORM")
    _clock(store).advance(1.5)
    await _say(store, conv, "e2", "second")
    rows = await store.messages(conv.id)
    assert [(r.role, r.text) for r in rows] == [("user", "first"), ("notice", "written by the ORM"), ("user", "second")]
    assert [r.created_at for r in rows] == [START, START + timedelta(seconds=1.5), START + timedelta(seconds=3)]
    assert all(r.created_at.tzinfo is not None for r in rows)
    # Both user messages joined the one queued run.
    assert rows[0].run_id == rows[2].run_id and rows[0].status == rows[2].status == "queued"


async def test_claim_gives_prompt_and_history_and_end_run_records_the_reply(store: Store) -> None:
    conv = await _conversation(store)
    first = await _say(store, conv, "e1", "what time is it?")
    claimed = await store.claim_next_run(conv.id)
    assert claimed is not None and claimed.fresh
    assert claimed.run.id == first.run_id and claimed.run.status == "running" and claimed.run.started_at == START
    assert claimed.run.requester_name == "Ann" and claimed.run.conversation_id == conv.id
    assert claimed.prompt == [Line("user", "what time is it?", "Ann")] and claimed.history == []
    assert await store.claim_next_run(conv.id) is None, "one run at a time per conversation"

    _clock(store).advance(2)
    await store.end_run(first.run_id, "finished", usage=(1, 10, 5), reply="Noon.")
    run = await store.run(first.run_id)
    assert run is not None and run.status == "finished" and run.finished_at == START + timedelta(seconds=2)
    assert (run.requests, run.input_tokens, run.output_tokens) == (1, 10, 5)

    _clock(store).advance(1)
    await _say(store, conv, "e2", "thanks")
    again = await store.claim_next_run(conv.id)
    assert again is not None
    assert again.history == [Line("user", "what time is it?", "Ann"), Line("assistant", "Noon.", "")]
    assert again.prompt == [Line("user", "thanks", "Ann")]
    # The answer is dated when it began streaming, right after the turn it answers.
    answer = [m for m in await store.messages(conv.id) if m.role == "assistant"]
    assert answer[0].created_at == START


async def test_redelivery_and_a_full_queue_store_nothing(store: Store) -> None:
    conv = await _conversation(store)
    await _say(store, conv, "e1", "one", limit=1)
    with pytest.raises(Duplicate):
        await _say(store, conv, "e1", "one again", limit=1)
    with pytest.raises(QueueFull):
        await _say(store, conv, "e2", "two", limit=1)
    assert [m.text for m in await store.messages(conv.id)] == ["one"]
    assert await store.seen("web", ["e1"]) is True
    # The refused event left no ledger row: once the queue drains, its retry is accepted.
    assert await store.claim_next_run(conv.id) is not None
    await _say(store, conv, "e2", "two", limit=1)
    assert [m.text for m in await store.messages(conv.id)] == ["one", "two"]
    assert await store.seen("web", ["e3"]) is False and await store.seen("web", ["e3"]) is True


async def test_a_lapsed_lease_hands_the_run_back(store: Store) -> None:
    conv = await _conversation(store)
    ingested = await _say(store, conv, "e1", "hello")
    assert await store.claim_next_run(conv.id) is not None
    _clock(store).advance(30)
    assert await store.claim_next_run(conv.id) is None, "the lease still holds"
    _clock(store).advance(31)
    later = await _say(store, conv, "e2", "anyone there?")  # queued behind the running run
    taken = await store.claim_next_run(conv.id)
    assert taken is not None and taken.run.id == ingested.run_id and not taken.fresh
    assert taken.run.started_at == START and taken.prompt == [Line("user", "hello", "Ann")]
    assert taken.more, "the claim must say another run waits behind this one"
    await store.end_run(taken.run.id, "finished", reply="Hi.")
    last = await store.claim_next_run(conv.id)
    assert last is not None and last.run.id == later.run_id and not last.more


async def test_delivery_rows_keep_the_posted_message(store: Store) -> None:
    await store.save_delivery("run-1", 0, "m-1", "Hel", False, new=True)
    _clock(store).advance(1)
    await store.save_delivery("run-1", 0, None, "Hello.", True)
    await store.save_delivery("run-1", 1, "m-2", "More.", True)
    rows = await store.deliveries("run-1")
    assert [(r.seq, r.platform_message_id, r.text, r.final) for r in rows] == [
        (0, "m-1", "Hello.", True),
        (1, "m-2", "More.", True),
    ]
    assert rows[0].updated_at == START + timedelta(seconds=1)


async def test_sqlite_direct_transactions_wait_for_a_session_and_refuse_to_nest(tmp_path: Path) -> None:
    import asyncio

    from sqlalchemy import text

    from gateway.store import driver

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'd.db'}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    try:
        conv = await _conversation(store)
        order: list[str] = []
        async with store.sessions() as s:  # an ORM session holds the one connection across awaits
            await s.execute(text("SELECT 1"))
            waiting = asyncio.create_task(_say(store, conv, "e1", "queued behind the session"))
            await asyncio.sleep(0.05)
            assert not waiting.done(), "a driver transaction ran inside someone else's session"
            order.append("session done")
        await waiting
        order.append("message stored")
        assert order == ["session done", "message stored"]
        assert [m.text for m in await store.messages(conv.id)] == ["queued behind the session"]

        # A direct transaction that awaits the ORM would run its statements inside it: refused.
        with pytest.raises(RuntimeError, match="direct transaction"):
            async with driver.transaction(engine) as tx:
                await tx.run("INSERT INTO adapter_state (binding_id, key, value) VALUES ('b', 'k', 'v')")
                await store.get_state("b", "k")
        assert await store.get_state("b", "k") is None, "the refused transaction was rolled back"
    finally:
        await engine.dispose()
