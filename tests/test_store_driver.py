"""The per-message store methods, which run plain SQL on the driver, on SQLite and PostgreSQL.

Their rows must read back through the ORM exactly as the ORM writes them (times in UTC, in
order), and the ledger, the queue limit and leases must behave the same on both engines.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from gateway.approvals.arguments import digest
from gateway.clock import ManualClock
from gateway.store.approvals import ApprovalStore, NewItem
from gateway.store.availability import StoreUnavailable
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import (
    Duplicate,
    FinalRow,
    Identity,
    Ingested,
    Line,
    QueueFull,
    Store,
    ConversationRef,
)

from .conftest import pg_database, wait_for

START = datetime(2026, 3, 1, 12, 0, 0, tzinfo=timezone.utc)  # microsecond 0: the text format must keep them
ANN = Identity("person-ann", "Ann")


# "memory": an in-memory SQLite database (tests and embedders use one), through the same fast path.
@pytest.fixture(params=["sqlite", "memory", pytest.param("postgresql", marks=pytest.mark.postgres)])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    async with contextlib.AsyncExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
        elif request.param == "memory":
            url = "sqlite+aiosqlite:///:memory:"
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


@contextlib.asynccontextmanager
async def _pg_store() -> AsyncIterator[tuple[Store, str]]:
    """A store on a fresh, migrated PostgreSQL database of its own, and that database's URL."""
    async with pg_database() as url:
        engine = create_engine(url)
        try:
            await migrate(engine)
            yield Store(engine, clock=ManualClock(START)), url
        finally:
            await engine.dispose()


async def _say(store: Store, conv: ConversationRef, event: str, text: str, limit: int = 10):  # type: ignore[no-untyped-def]
    return await store.ingest(binding_id="web", event_ids=[event], conversation=conv, identity=ANN,
                              account_id="ann", text=text, agent_id="assistant", platform_message_id=event,
                              queue_limit=limit)


async def _asking(store: Store) -> tuple[ConversationRef, Ingested, ApprovalStore, str]:
    """A running run that asked for one gated call: its conversation, its message, the approvals and the card."""
    conv = await _conversation(store)
    asked = await _say(store, conv, "e1", "deploy api")
    assert await store.claim_next_run(conv.id) is not None
    approvals = ApprovalStore(store.sessions, store.clock)
    card = await approvals.create_card(run_id=asked.run_id, conversation_id=conv.id, binding_id="web",
                                       deciders="requester", expires_at=START + timedelta(days=1),
                                       items=[NewItem("call-1", "deploy", "deploy", "test_ops", "{}", digest({}))])
    return conv, asked, approvals, card


def _clock(store: Store) -> ManualClock:
    assert isinstance(store.clock, ManualClock)
    return store.clock


async def test_driver_rows_read_back_through_the_orm_in_order(store: Store) -> None:
    conv = await _conversation(store)
    await _say(store, conv, "e1", "first")
    _clock(store).advance(0.000_250)  # sub-millisecond steps: only microseconds keep the order
    await store.add_message(conv.id, "notice", "written by the ORM")
    _clock(store).advance(0.000_250)
    await _say(store, conv, "e2", "second")
    _clock(store).advance(0.000_250)
    await store.add_message(conv.id, "notice", "the ORM again")
    rows = await store.messages(conv.id)
    assert [r.text for r in rows] == ["first", "written by the ORM", "second", "the ORM again"]
    step = timedelta(microseconds=250)
    assert [r.created_at for r in rows] == [START, START + step, START + 2 * step, START + 3 * step]
    assert all(r.created_at.tzinfo is not None for r in rows)
    # Both user messages joined the one queued run.
    assert rows[0].run_id == rows[2].run_id and rows[0].status == rows[2].status == "queued"


async def test_a_parked_run_resumes_and_its_answer_is_dated_from_the_resume(store: Store) -> None:
    conv, asked, approvals, card = await _asking(store)
    await store.end_run(asked.run_id, "parked", state="[]", reply="Let me do that.")
    run = await store.run(asked.run_id)
    assert run is not None and run.status == "parked" and run.state == "[]" and run.finished_at is None
    _clock(store).advance(60)
    # The card's last decision puts the parked run back in its conversation's queue, in the
    # same transaction (no crash can leave a decided card with its run parked).
    assert await approvals.decide(card_id=card, approval_id=None, state="approved", who="Ada", account_id="ada",
                                  surface="api") == (1, True)
    resumed = await store.claim_next_run(conv.id)
    assert resumed is not None and resumed.run.id == asked.run_id and not resumed.fresh
    _clock(store).advance(1)
    await store.end_run(asked.run_id, "finished", reply="Deployed.")
    answers = [(m.text, m.created_at) for m in await store.messages(conv.id) if m.role == "assistant"]
    assert answers == [("Let me do that.", START), ("Deployed.", START + timedelta(seconds=61))]


@pytest.mark.postgres
async def test_a_decision_beside_a_run_asking_again_waits_for_the_card_and_fails_neither() -> None:
    """A run asking again after a restart closes the card it made before (`create_card`: the card's
    row, then its items) while a person decides that card. Deciding took the items first, then the
    card: on PostgreSQL each held what the other wanted, and the database failed one of them (a
    run answered "Something went wrong (DBAPIError)", tests/chaos on a loaded machine)."""
    import asyncpg

    async with pg_database() as url:
        engine = create_engine(url)
        try:
            await migrate(engine)
            _, _, approvals, card = await _asking(Store(engine, clock=ManualClock(START)))
            dsn = url.replace("postgresql+asyncpg", "postgresql")
            replacing, watching = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
            try:
                # create_card's order, its first step taken: the card's row is held.
                tx = replacing.transaction()
                await tx.start()
                await replacing.execute("UPDATE approval_cards SET state = 'replaced' WHERE id = $1", card)
                deciding = asyncio.create_task(approvals.decide(card_id=card, approval_id=None, state="approved",
                                                                who="Ada", account_id="ada", surface="api"))

                async def decision_waits() -> bool:
                    return bool(await watching.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock'"))
                await wait_for(decision_waits, what="the decision waiting for a lock")
                # Its second step: the card's items (a deadlock fails this or the decision).
                await replacing.execute("UPDATE approvals SET state = 'expired' WHERE card_id = $1 "
                                        "AND state = 'pending'", card)
                await tx.commit()
                assert await asyncio.wait_for(deciding, 30) == (0, False), "the card was closed first: nothing to win"
            finally:
                await replacing.close()
                await watching.close()
        finally:
            await engine.dispose()


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


async def test_a_claim_brings_the_runs_conversation_in_a_process_that_never_saw_it(store: Store) -> None:
    """The run is prepared from what its claim brings (`Runner.prepare` reads nothing else): where its replies
    go must be there after a restart too, when this process has not seen the conversation yet."""
    conv = await _conversation(store)
    await _say(store, conv, "e1", "what time is it?")
    claimed = await store.claim_next_run(conv.id)
    assert claimed is not None and claimed.conversation == conv
    await store.end_run(claimed.run.id, "finished", reply="Noon.")
    await _say(store, conv, "e2", "thanks")

    restarted = Store(store.engine, clock=ManualClock(START + timedelta(seconds=1)))
    again = await restarted.claim_next_run(conv.id)
    assert again is not None and again.conversation == conv
    assert again.prompt == [Line("user", "thanks", "Ann")]
    assert again.history == [Line("user", "what time is it?", "Ann"), Line("assistant", "Noon.", "")]


async def test_a_queued_run_is_claimed_knowing_whether_files_came_with_its_messages(store: Store) -> None:
    """A claim says whether the run's messages came with files (read with its live runs, no statement of
    its own): a run with none is not looked up for them, one with some is."""
    conv = await _conversation(store)
    plain = await _say(store, conv, "e1", "no files")
    with_files = await store.ingest(binding_id="web", event_ids=["e2"], conversation=conv, identity=ANN,
                                    account_id="ann", text="a file", agent_id="assistant", platform_message_id="e2",
                                    queue_limit=10, files='[{"name": "a.png"}]')
    assert with_files.run_id == plain.run_id  # joined the queued run: its files are the run's
    other = await store.create_conversation(
        ConversationRef("", "web:local:c2", "web", "web", "local", "c2", None, "dm"))
    bare = await _say(store, other, "e3", "nothing attached")
    claimed = await store.claim_next_run(conv.id)
    assert claimed is not None and claimed.run.id == plain.run_id and claimed.files
    claimed = await store.claim_next_run(other.id)
    assert claimed is not None and claimed.run.id == bare.run_id and not claimed.files


async def test_a_message_into_an_idle_conversation_is_claimed_with_its_ingest(store: Store) -> None:
    async def say(event: str, text: str, conv: ConversationRef) -> Ingested:
        return await store.ingest(binding_id="web", event_ids=[event], conversation=conv, identity=ANN,
                                  account_id="ann", text=text, agent_id="assistant", platform_message_id=event,
                                  queue_limit=10, start=True)

    new = ConversationRef("", "web:local:c9", "web", "web", "local", "c9", None, "dm")
    first = await say("e1", "what time is it?", new)
    claimed = first.claimed
    assert claimed is not None and claimed.fresh and not claimed.more and not claimed.files
    assert claimed.conversation == first.conversation
    assert claimed.prompt == [Line("user", "what time is it?", "Ann")] and claimed.history == []
    # Stored as the claim would have left it: running, leased to this process; nothing left to claim.
    run = await store.run(first.run_id)
    assert run is not None and run.status == "running" and run.lease_owner == store.owner and run.started_at == START
    assert run.lease_expires == START + timedelta(seconds=store.lease_seconds)
    assert [m.status for m in await store.messages(first.conversation.id)] == ["processing"]
    assert await store.claim_next_run(first.conversation.id) is None

    # While that run goes on, the next message is queued behind it, not started.
    _clock(store).advance(1)
    second = await say("e2", "and the date?", first.conversation)
    assert second.claimed is None and second.run_id != first.run_id
    await store.end_run(first.run_id, "finished", reply="Noon.")
    _clock(store).advance(1)
    queued = await store.claim_next_run(first.conversation.id)
    assert queued is not None and queued.run.id == second.run_id
    await store.end_run(second.run_id, "finished", reply="The first.")
    _clock(store).advance(1)

    # Idle again: started at once, reminded of the conversation so far, as a claim would be.
    third = await say("e3", "thanks", first.conversation)
    assert third.claimed is not None and third.claimed.run.id == third.run_id
    assert third.claimed.history == [Line("user", "what time is it?", "Ann"), Line("assistant", "Noon.", ""),
                                     Line("user", "and the date?", "Ann"), Line("assistant", "The first.", "")]


async def test_a_message_started_with_its_ingest_is_reminded_of_what_its_claim_would_have_read(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest turns, the message itself taking one of the places wherever it sorts: on PostgreSQL the
    turns are read in the statement that stores the message, which does not see it (`_history_beside`)."""
    from gateway.store import repo

    monkeypatch.setattr(repo, "HISTORY_MESSAGES", 3)

    def say(store: Store, event: str) -> Any:
        return store.ingest(binding_id="web", event_ids=[event], conversation=conv, identity=ANN, account_id="ann",
                            text=f"q{event}", agent_id="assistant", platform_message_id=event, queue_limit=10,
                            start=True)

    conv = await _conversation(store)
    for i in range(3):
        said = await _say(store, conv, f"{i}", f"q{i}")
        await store.claim_next_run(conv.id)
        await store.end_run(said.run_id, "finished", reply=f"a{i}")
        _clock(store).advance(1)
    newest = await say(store, "3")  # sorts first: it takes a place, two turns are left
    assert newest.claimed is not None
    assert newest.claimed.history == [Line("user", "q2", "Ann"), Line("assistant", "a2", "")]
    await store.end_run(newest.run_id, "finished", reply="a3")
    # A replica whose clock is behind: its message sorts after three turns, which keep their places.
    behind = await say(Store(store.engine, clock=ManualClock(START - timedelta(days=1))), "4")
    assert behind.claimed is not None
    assert behind.claimed.history == [Line("assistant", "a2", ""), Line("user", "q3", "Ann"), Line("assistant", "a3", "")]


async def test_redelivery_and_a_full_queue_store_nothing(store: Store) -> None:
    conv = await _conversation(store)
    await _say(store, conv, "e1", "one", limit=1)
    with pytest.raises(Duplicate):
        await _say(store, conv, "e1", "one again", limit=1)
    with pytest.raises(QueueFull):
        await _say(store, conv, "e2", "two", limit=1)
    assert [m.text for m in await store.messages(conv.id)] == ["one"]
    assert await store.record("web", ["e1"]) is False
    # The refused event left no ledger row: once the queue drains, its retry is accepted.
    assert await store.claim_next_run(conv.id) is not None
    await _say(store, conv, "e2", "two", limit=1)
    assert [m.text for m in await store.messages(conv.id)] == ["one", "two"]
    assert await store.record("web", ["e3"]) is True and await store.record("web", ["e3"]) is False


async def test_events_recorded_together_are_all_kept_or_none(store: Store) -> None:
    """A message's ids go into the ledger in one statement: one of them known already is a
    redelivery, and the others are not kept either (its retry is still a first delivery of them)."""
    assert await store.record("web", ["e2"]) is True
    assert await store.record("web", ["e1", "e2"]) is False
    assert await store.record("web", ["e1"]) is True, "e1 was rolled back with the duplicate"
    assert await store.record("web", ["e3", "e3"]) is False, "the same id twice is a redelivery of it"
    conv = await _conversation(store)
    with pytest.raises(Duplicate):
        await store.ingest(binding_id="web", event_ids=["e4", "e1"], conversation=conv, identity=ANN, account_id="ann",
                           text="hello", agent_id="assistant", platform_message_id="e4", queue_limit=10)
    assert await store.messages(conv.id) == []
    assert await store.record("web", ["e4", "e5"]) is True


async def test_a_conversation_not_at_hand_is_found_by_its_key_not_made_twice(store: Store) -> None:
    """`ingest` given a conversation by its key alone (a process that does not have it at hand: another
    replica, a restart) stores the message in the one under that key, behind its queue."""
    first = await store.ingest(binding_id="web", event_ids=["e1"], identity=ANN, account_id="ann", text="one",
                               conversation=ConversationRef("", "web:local:c7", "web", "web", "local", "c7", None, "dm"),
                               agent_id="assistant", platform_message_id="e1", queue_limit=10, start=True)
    assert first.claimed is not None
    elsewhere = Store(store.engine, clock=store.clock)  # nothing at hand
    second = await elsewhere.ingest(binding_id="web", event_ids=["e2"], identity=ANN, account_id="ann", text="two",
                                    conversation=ConversationRef("", "web:local:c7", "web", "web", "local", "c7",
                                                                 None, "dm"),
                                    agent_id="assistant", platform_message_id="e2", queue_limit=10, start=True)
    assert second.conversation == first.conversation
    assert second.claimed is None and second.new_run, "queued behind the running run, not started beside it"
    assert [m.text for m in await store.messages(first.conversation.id)] == ["one", "two"]


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
    await store.save_delivery("run-1", 0, "m-1", "Hel", False)
    _clock(store).advance(1)
    await store.save_delivery("run-1", 0, None, "Hello.", True)
    await store.save_delivery("run-1", 1, "m-2", "More", False)
    await store.save_delivery("run-1", 1, "", "More.", True)  # an edit that names no message: "" as None
    rows = await store.deliveries("run-1")
    assert [(r.seq, r.platform_message_id, r.text, r.final) for r in rows] == [
        (0, "m-1", "Hello.", True),
        (1, "m-2", "More.", True),
    ]
    assert rows[0].updated_at == START + timedelta(seconds=1)


async def test_a_runs_end_writes_its_replys_final_rows_in_the_same_transaction(store: Store) -> None:
    conv = await _conversation(store)
    said = await _say(store, conv, "e1", "tell me two things")
    await store.claim_next_run(conv.id)
    await store.save_delivery(said.run_id, 0, "m-1", "One", False)  # the draft, posted earlier
    _clock(store).advance(1)
    rows = [FinalRow(0, None, "One."), FinalRow(1, "m-2", "Two.")]  # the draft edited, a second message posted
    await store.end_run(said.run_id, "finished", reply="One.\n\nTwo.", deliveries=rows)
    await store.end_run(said.run_id, "finished", reply="One.\n\nTwo.", deliveries=rows)  # a retried end: no twin rows
    assert [(r.seq, r.platform_message_id, r.text, r.final) for r in await store.deliveries(said.run_id)] == [
        (0, "m-1", "One.", True),
        (1, "m-2", "Two.", True),
    ]
    run = await store.run(said.run_id)
    assert run is not None and run.status == "finished"
    assert [m.text for m in await store.messages(conv.id) if m.role == "assistant"] == ["One.\n\nTwo."], \
        "the retried end added its reply once"
    await store.end_run("no-such-run", "finished", reply="Lost.")  # its run is gone: nothing is written
    assert [m.text for m in await store.messages(conv.id)] == ["tell me two things", "One.\n\nTwo."]


async def test_a_reply_posting_one_message_twice_keeps_what_its_last_edit_left(store: Store) -> None:
    """Two final rows of one seq (not what a reply makes today, but what end_run accepts): written one after
    the other, the second updating the first, on PostgreSQL too, where one statement could not write the
    row twice and the other rows go in one statement (`_pg_end_sql`)."""
    conv = await _conversation(store)
    said = await _say(store, conv, "e1", "hi")
    await store.claim_next_run(conv.id)
    await store.end_run(said.run_id, "finished", reply="Hello.",
                        deliveries=[FinalRow(0, "m-1", "Hel"), FinalRow(0, None, "Hello.")])
    assert [(r.seq, r.platform_message_id, r.text, r.final) for r in await store.deliveries(said.run_id)] == [
        (0, "m-1", "Hello.", True)]
    assert [(m.role, m.status) for m in await store.messages(conv.id)] == [("user", "processed"), ("assistant", "final")]


@contextlib.asynccontextmanager
async def _counted_pg_store() -> AsyncIterator[tuple[Store, list[str]]]:
    """A store on a fresh PostgreSQL database, and every statement its connections send (BEGIN and
    COMMIT included: each is a round trip), as asyncpg's query logger sees them."""
    from sqlalchemy import event

    sent: list[str] = []
    async with pg_database() as url:
        engine = create_engine(url)
        event.listen(engine.sync_engine, "connect",
                     lambda dbapi, _record: dbapi.driver_connection.add_query_logger(lambda r: sent.append(r.query)))
        try:
            await migrate(engine)
            yield Store(engine, clock=ManualClock(START)), sent
        finally:
            await engine.dispose()


async def _trips(sent: list[str], work: Any) -> tuple[Any, list[str]]:
    sent.clear()
    result = await work
    return result, list(sent)


@pytest.mark.postgres
async def test_on_postgresql_a_messages_rows_and_its_runs_end_go_in_few_round_trips() -> None:
    """Each statement on PostgreSQL is a round trip (about 100 us of the loop's CPU, bench/README.md): a new
    conversation's row, a new run, its message, the message's files and the turns before it go in one; the
    run's end (its reply's delivery row, the reply, the run's row, its messages made history) in one. The
    lock stays a statement of its own before the queue is read: one statement's snapshot is taken at its
    start, before any wait for the lock in it."""
    async with _counted_pg_store() as (store, sent):
        def say(event: str, conv: ConversationRef, files: str | None = None) -> Any:
            return store.ingest(binding_id="web", event_ids=[event], conversation=conv, identity=ANN, account_id="ann",
                                text=f"said {event}", agent_id="assistant", platform_message_id=event, queue_limit=10,
                                files=files, start=True)

        new = ConversationRef("", "web:local:c5", "web", "web", "local", "c5", None, "dm")
        first, trips = await _trips(sent, say("e1", new))
        # BEGIN, the ledger, the key's lock, the conversation with its run and message, COMMIT.
        assert first.claimed is not None and len(trips) == 5, trips
        conv = first.conversation
        _, trips = await _trips(sent, store.end_run(first.run_id, "finished", usage=(1, 2, 3), reply="Hi.",
                                                    deliveries=[FinalRow(0, "m-1", "Hi.")]))
        assert len(trips) == 3, trips  # BEGIN, the run's end, COMMIT

        # The files' row is keyed by the message's id zero-padded to 12 digits, as on SQLite (a 10-digit id here).
        async with store.engine.connect() as c:
            await c.exec_driver_sql("SELECT setval(pg_get_serial_sequence('messages', 'id'), 1234567889)")
        again, trips = await _trips(sent, say("e2", conv, files='[{"name": "a.png"}]'))
        # BEGIN, the ledger, the lock, the queue, the run with its message, its files and the turns before, COMMIT.
        assert again.claimed is not None and again.claimed.files and len(trips) == 6, trips
        assert again.message_id == 1234567890
        assert await store.capability_state.keys("attachments", f"run:{again.run_id}") == ["001234567890"]
        assert again.claimed.history == [Line("user", "said e1", "Ann"), Line("assistant", "Hi.", "")]
        await store.end_run(again.run_id, "finished", reply="Seen.")
        third, _ = await _trips(sent, say("e3", conv, files="[]"))
        assert await store.capability_state.keys("attachments", f"run:{third.run_id}") == [f"{third.message_id:012d}"]
        assert [(r.seq, r.platform_message_id, r.text, r.final) for r in await store.deliveries(first.run_id)] == [
            (0, "m-1", "Hi.", True)]
        ended = await store.run(first.run_id)
        assert ended is not None and ended.status == "finished" and (ended.requests, ended.input_tokens) == (1, 2)
        assert [(m.text, m.status) for m in await store.messages(conv.id)][:3] == [
            ("said e1", "processed"), ("Hi.", "final"), ("said e2", "processed")]

        # A queued run's claim: BEGIN, the lock, the live runs with whether files came with each, the run's
        # row, its messages, the history, COMMIT (the files were a statement of their own).
        await store.end_run(third.run_id, "finished", reply="Third.")
        queued = await store.ingest(binding_id="web", event_ids=["e4"], conversation=conv, identity=ANN,
                                    account_id="ann", text="queued", agent_id="assistant", platform_message_id="e4",
                                    queue_limit=10, files='[{"name": "b.png"}]')
        claimed, trips = await _trips(sent, store.claim_next_run(conv.id))
        assert claimed is not None and claimed.run.id == queued.run_id and claimed.files and len(trips) == 7, trips


async def until_a_lock_is_waited_for(url: str, ended: Callable[[], bool], what: str) -> None:
    """Until a session on `url`'s PostgreSQL database waits on another's lock, or `ended()`: the server says
    when one is blocked behind another, not a window of time."""
    import asyncpg

    watcher = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
    try:
        async def waiting() -> bool:
            return ended() or bool(await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock'"))
        await wait_for(waiting, what=what)
    finally:
        await watcher.close()


def _parked(engine: Any) -> int:
    """Transactions waiting for a session to give the SQLite connection back (`sqlite.given_back`):
    what a test waits for instead of a window in which they must not have run."""
    from gateway.store import sqlite

    return sum(not w.done() for w in sqlite._waiting.get(engine.sync_engine, []))


async def test_sqlite_driver_transactions_wait_for_a_session(tmp_path: Path) -> None:
    """A driver transaction never runs inside an ORM session's (it cannot nest the other way:
    a program yields statements and awaits nothing)."""
    import asyncio

    from sqlalchemy import text

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'd.db'}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    try:
        conv = await _conversation(store)
        order: list[str] = []
        async with store.sessions() as s:  # an ORM session holds the one connection across awaits
            await s.execute(text("SELECT 1"))
            waiting = asyncio.create_task(_say(store, conv, "e1", "queued behind the session"))
            await wait_for(lambda: waiting.done() or _parked(engine) == 1, what="the transaction to wait or end")
            assert not waiting.done(), "a driver transaction ran inside someone else's session"
            order.append("session done")
        await waiting
        order.append("message stored")
        assert order == ["session done", "message stored"]
        assert [m.text for m in await store.messages(conv.id)] == ["queued behind the session"]

    finally:
        await engine.dispose()


async def test_transactions_that_waited_for_a_session_do_not_queue_in_the_pool(tmp_path: Path) -> None:
    """Transactions that arrive while a session holds the connection wait for it to be given back,
    then take the idle path. Queued in the pool instead, each checked the connection out in its
    turn, every later transaction queued behind it, and under a burst the store stayed that way:
    a checkout and a thread round trip per transaction, half again the daemon's
    CPU per message."""
    import asyncio

    from sqlalchemy import event, text

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'p.db'}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    checkouts: list[int] = []
    event.listen(engine.sync_engine, "checkout", lambda *_: checkouts.append(1))
    try:
        conv = await _conversation(store)
        async with store.sessions() as s:
            await s.execute(text("SELECT 1"))
            checkouts.clear()
            waiting = [asyncio.create_task(_say(store, conv, f"e{i}", f"message {i}")) for i in range(3)]
            await wait_for(lambda: any(t.done() for t in waiting) or _parked(engine) == 3,
                           what="the transactions to wait or end")
            assert not any(t.done() for t in waiting)
        await asyncio.gather(*waiting)
        assert checkouts == []
        assert sorted(m.text for m in await store.messages(conv.id)) == [f"message {i}" for i in range(3)]
    finally:
        await engine.dispose()


async def test_a_transaction_is_not_starved_by_sessions_queueing_for_the_connection(tmp_path: Path) -> None:
    """Sessions that keep queueing for the connection must not keep a transaction waiting for it
    past its bound: woken when one gives the connection back, the transaction runs before the
    next session in the pool's queue takes it."""
    import asyncio

    from sqlalchemy import text

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    stop = asyncio.Event()

    async def sessions() -> None:
        while not stop.is_set():
            async with store.sessions() as s:
                await s.execute(text("SELECT 1"))

    try:
        conv = await _conversation(store)
        readers = [asyncio.create_task(sessions()) for _ in range(3)]
        await asyncio.sleep(0.05)
        for i in range(5):
            # Milliseconds each; starved, each would wait out the queue's bound (a minute).
            await asyncio.wait_for(_say(store, conv, f"e{i}", f"message {i}"), 5)
        stop.set()
        await asyncio.gather(*readers)
        assert len(await store.messages(conv.id)) == 5
    finally:
        stop.set()
        await engine.dispose()


@pytest.mark.postgres
async def test_a_message_arriving_while_its_run_is_claimed_is_not_lost() -> None:
    """On PostgreSQL, ingest and claim serialize on the conversation: a message either joins
    the run before it is claimed (and is in its prompt) or queues a new run."""
    import asyncio

    from gateway.store import driver

    async with pg_database() as url:
        engine = create_engine(url)
        await migrate(engine)
        store = Store(engine, clock=ManualClock(START))
        try:
            conv = await _conversation(store)
            first = await _say(store, conv, "e1", "one")
            reached, go_on = asyncio.Event(), asyncio.Event()
            original = driver._AsyncpgTx.one

            async def paused(tx: driver._AsyncpgTx, sql: str, **params: object) -> driver.Row | None:
                # Hold the second message's ingest just before it inserts, inside its transaction.
                if sql.startswith("INSERT INTO messages") and params.get("text") == "two":
                    reached.set()
                    await go_on.wait()
                return await original(tx, sql, **params)

            driver._AsyncpgTx.one = paused  # type: ignore[method-assign]
            try:
                second = asyncio.create_task(_say(store, conv, "e2", "two"))
                await reached.wait()
                claim = asyncio.create_task(store.claim_next_run(conv.id))
                await until_a_lock_is_waited_for(url, claim.done, "the claim to wait on the ingest's lock, or to end")
                assert not claim.done(), "the claim did not wait for the ingest in flight"
                go_on.set()
                joined, claimed = await second, await claim
            finally:
                driver._AsyncpgTx.one = original  # type: ignore[method-assign]
            assert claimed is not None and claimed.run.id == first.run_id
            if joined.run_id == first.run_id:
                assert [line.text for line in claimed.prompt] == ["one", "two"]
            else:
                assert [line.text for line in claimed.prompt] == ["one"] and claimed.more
        finally:
            await engine.dispose()


async def test_after_a_restart_every_queued_run_of_a_conversation_runs(tmp_path: Path) -> None:
    """A run interrupted by a stop and one queued behind it both run, in order, after the start."""
    import asyncio

    from gateway.runs.queue import Scheduler
    from gateway.store.repo import Claimed

    url = f"sqlite+aiosqlite:///{tmp_path / 'r.db'}"
    engine = create_engine(url)
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    conv = await _conversation(store)
    first = await _say(store, conv, "e1", "one")
    assert await store.claim_next_run(conv.id) is not None  # running when the process stopped
    _clock(store).advance(1)
    second = await _say(store, conv, "e2", "two")
    await engine.dispose()

    engine = create_engine(url)
    store = Store(engine, clock=ManualClock(START + timedelta(seconds=2)))
    ran: list[str] = []

    async def execute(claimed: Claimed) -> None:
        ran.append(claimed.run.id)
        await store.end_run(claimed.run.id, "finished", reply="ok")

    scheduler = Scheduler(store, execute, concurrent_runs=4)
    try:
        await store.requeue_interrupted(at_start=True)
        for conversation_id in await store.conversations_with_queued_runs():
            scheduler.wake(conversation_id)  # once, as the start-up sweep does
        for _ in range(100):
            if len(ran) == 2:
                break
            await asyncio.sleep(0.02)
        assert ran == [first.run_id, second.run_id]
    finally:
        await scheduler.cancel()
        await engine.dispose()


async def test_under_a_burst_a_runs_end_claims_the_next_waiting_run_in_its_transaction(tmp_path: Path) -> None:
    """More conversations than slots: each run's end claims the next waiting conversation's run in the
    end's own transaction (SQLite), so a waiting run costs no transaction of its own. Every run runs once,
    never more at once than the limit, and a conversation's runs in the order they were queued."""
    import asyncio

    from gateway.runs.queue import Scheduler
    from gateway.store import sqlite as on_sqlite
    from gateway.store.repo import Claimed

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'b.db'}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    convs = [await store.create_conversation(ConversationRef("", f"web:local:b{i}", "web", "web", "local", f"b{i}",
                                                             None, "dm")) for i in range(10)]
    for i, conv in enumerate(convs):
        await _say(store, conv, f"e{i}", f"hello {i}")
    connection = on_sqlite.idle_connection(engine.sync_engine)
    assert connection is not None
    statements: list[str] = []
    connection._conn.set_trace_callback(statements.append)
    ran: list[tuple[str, list[str]]] = []
    running, most = 0, 0

    async def execute(claimed: Claimed) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        ran.append((claimed.conversation.id, [line.text for line in claimed.prompt]))
        if claimed.prompt[0].text == "hello 0":  # queued behind the one running: a run of its own, after it
            await _say(store, convs[0], "later", "hello again")
            scheduler.wake(convs[0].id)
        await asyncio.sleep(0.01)
        running -= 1
        await store.end_run(claimed.run.id, "finished", reply="ok")

    scheduler = Scheduler(store, execute, concurrent_runs=2)
    try:
        for conv in convs:
            scheduler.wake(conv.id)
        await wait_for(lambda: len(ran) == 11 and not scheduler.active, what="every run")
        assert most == 2
        assert sorted(ran) == sorted([(conv.id, [f"hello {i}"]) for i, conv in enumerate(convs)]
                                     + [(convs[0].id, ["hello again"])])
        assert [p for c, p in ran if c == convs[0].id] == [["hello 0"], ["hello again"]]
        for conv in convs:
            assert {m.status for m in await store.messages(conv.id)} == {"processed", "final"}
        # 11 ends, the first two claims in free slots, the later message's ingest; the 8 other claims
        # went in ends (11 of their own before), and so did "hello again"'s (it waited for a slot).
        begins = [s for s in statements if s == "BEGIN IMMEDIATE"]
        assert len(begins) == 11 + 2 + 1, statements
    finally:
        await scheduler.cancel()
        await engine.dispose()


async def test_transactions_on_the_loop_still_get_the_wal_checkpointed(tmp_path: Path) -> None:
    """A transaction run on the loop never checkpoints there (a checkpoint syncs the disk); the
    thread does it every so often, so the WAL stays within what SQLite's own auto-checkpoint keeps."""
    import asyncio
    import sqlite3

    from gateway.store import sqlite as on_sqlite

    database = tmp_path / "w.db"
    engine = create_engine(f"sqlite+aiosqlite:///{database}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    try:
        conv = await _conversation(store)
        for burst in range(6):  # bursts, as platforms deliver them: concurrent transactions
            await asyncio.gather(*(_say(store, conv, f"e{burst}-{i}", "x" * 2000, limit=10_000) for i in range(100)))
        with sqlite3.connect(database) as other:  # the frames in the WAL (a checkpoint lets it start over)
            _busy, frames, _copied = other.execute("PRAGMA wal_checkpoint(NOOP)").fetchone()
        assert frames < on_sqlite.AUTOCHECKPOINT, frames  # about 10,000 with no checkpoint
        assert len(await store.messages(conv.id)) == 600
    finally:
        await engine.dispose()


async def test_a_transaction_left_running_in_the_thread_by_a_cancelled_caller_is_not_joined(tmp_path: Path) -> None:
    """Transactions run on the loop only when the connection's thread has nothing of ours: a caller
    cancelled while its transaction still runs there must not let the next one start beside it,
    on the same connection, inside that transaction."""
    import asyncio
    import time

    from gateway.store import sqlite as on_sqlite

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'c.db'}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    try:
        conv = await _conversation(store)
        started = asyncio.Event()
        loop = asyncio.get_running_loop()

        def slow(conn: Any) -> None:  # a transaction that takes a while in the thread
            conn.execute("BEGIN IMMEDIATE")
            loop.call_soon_threadsafe(started.set)
            time.sleep(0.3)
            conn.execute("INSERT INTO adapter_state (binding_id, key, value) VALUES ('web', 'slow', 'done')")
            conn.commit()

        connection = on_sqlite.idle_connection(engine.sync_engine)
        assert connection is not None
        caller = asyncio.create_task(on_sqlite.run(connection, slow, 5.0))
        await started.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        await _say(store, conv, "e1", "after the cancelled caller")
        assert await store.get_state("web", "slow") == "done"
        assert [m.text for m in await store.messages(conv.id)] == ["after the cancelled caller"]
    finally:
        await engine.dispose()


async def test_a_run_started_after_waiting_for_its_conversation_is_dated_when_it_got_it() -> None:
    """On PostgreSQL a replica's ingest or claim may wait on the conversation's lock while another
    replica's run ends. The new run's start (and its message) is dated when the lock was had, not
    when the wait began: dated before, it read as starting before the other run ended (two runs of
    one conversation overlapping, tests/test_replicas.py on a loaded machine), and its message sorted
    before the reply that came first."""
    import asyncpg

    async with _pg_store() as (store, url):
        conv = await _conversation(store)
        queued = await _say(store, conv, "e0", "queued first")
        dsn = url.replace("postgresql+asyncpg", "postgresql")
        holder, watching = await asyncpg.connect(dsn), await asyncpg.connect(dsn)

        async def waits_on_lock() -> bool:
            return bool(await watching.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'"))

        async def held_while(work: Any) -> Any:
            """Hold the conversation's lock (another replica's transaction), let `work` wait on it,
            let 5 s pass, then let go."""
            tx = holder.transaction()
            await tx.start()
            await holder.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", conv.id)
            task = asyncio.create_task(work)
            await wait_for(waits_on_lock, what="the store waiting on the conversation's lock")
            _clock(store).advance(5)
            await tx.commit()
            return await asyncio.wait_for(task, 30)

        try:
            claimed = await held_while(store.claim_next_run(conv.id))
            assert claimed is not None and claimed.run.id == queued.run_id
            run = await store.run(queued.run_id)
            assert run is not None and run.started_at == START + timedelta(seconds=5)
            await store.end_run(queued.run_id, "finished", reply="Done.")

            idle = await held_while(store.ingest(
                binding_id="web", event_ids=["e1"], conversation=conv, identity=ANN, account_id="ann",
                text="now you", agent_id="assistant", platform_message_id="e1", queue_limit=10, start=True))
            assert idle.claimed is not None
            started = await store.run(idle.run_id)
            assert started is not None and started.started_at == START + timedelta(seconds=10)
            first_end = run.started_at  # the reply "Done." is dated from its run's start
            mine = [m for m in await store.messages(conv.id) if m.text == "now you"]
            assert mine and mine[0].created_at == START + timedelta(seconds=10) > first_end
        finally:
            await holder.close()
            await watching.close()


@pytest.mark.postgres
async def test_a_pooled_connection_the_server_closed_is_replaced_before_a_message_uses_it() -> None:
    """A PostgreSQL restart or a terminated backend closes the connections waiting in the pool: the
    next message is stored on a new one (the pool checks without a round trip), at worst on its
    redelivery when the close came too late to be seen; never refused for good."""
    import asyncpg

    async with _pg_store() as (store, url):
        conv = await _conversation(store)
        await _say(store, conv, "e0", "before")  # the pool holds its connection now
        watching = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        try:
            await watching.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                                   " WHERE datname = current_database() AND pid <> pg_backend_pid()")

            async def gone() -> bool:
                return not await watching.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                                                   " current_database() AND pid <> pg_backend_pid()")

            await wait_for(gone, what="the store's backends gone")
        finally:
            await watching.close()
        try:
            after = await _say(store, conv, "e1", "after")
        except StoreUnavailable:  # closed a moment too late for the check to see: refused once, then
            after = await _say(store, conv, "e1", "after")  # stored when the platform delivers it again
        assert [m.text for m in await store.messages(conv.id)] == ["before", "after"] and after.message_id


async def test_notes_read_on_the_driver_are_the_orms_rows_and_never_a_stopped_one(store: Store) -> None:
    """What a run reads per request (`index`, `read`, `names`, on `driver.read`): the notes the ORM
    wrote, aware timestamps and all, only the run's own store, and nothing stopped."""
    from gateway.store.notes import INDEX, Holder, NoteStore, Scope

    notes = NoteStore(store)
    ann, bob = Scope("assistant", "person", "person-ann"), Scope("assistant", "person", "person-bob")
    other_agent, chat = Scope("helper", "person", "person-ann"), Scope("assistant", "chat", "person-ann")
    await notes.write(ann, INDEX, "- diet")
    await notes.write(ann, "diet", "vegetarian 🥕")
    await notes.write(ann, "old", "stale")
    await notes.write(bob, "diet", "vegan")
    await notes.write(other_agent, INDEX, "the helper's")
    await notes.suppress(ann, "old", True)
    written = {n.name: n for n in await notes.held(Holder("person", "person-ann")) if n.agent_id == "assistant"}

    assert await notes.read(ann, "diet") == written["diet"]
    assert (await notes.read(ann, "diet")).created_at.tzinfo is not None  # type: ignore[union-attr]
    assert await notes.read(ann, "old") is None, "a stopped note is not read"
    assert await notes.read(chat, "diet") is None
    assert await notes.names(ann) == [INDEX, "diet"]
    assert await notes.names(chat) == []
    assert await notes.index(ann) == "- diet"
    assert await notes.index(bob) is None
    assert await notes.index(other_agent) == "the helper's"
    await notes.suppress(ann, INDEX, True)
    assert await notes.index(ann) is None


async def test_capability_state_read_on_the_driver_is_what_was_written_and_only_its_scope(store: Store) -> None:
    """What planning reads per request (`get`, `keys`, `items`, on `driver.read`): the values written,
    text of every kind intact, in key order, of the one capability and scope asked for."""
    state = store.capability_state
    await state.put("planning", "conv-a", "current", '[{"id": "1", "content": "wäsche 🧺"}]')
    await state.put("planning", "conv-a", "finished:2026", "[]")
    await state.put("planning", "conv-b", "current", "the other conversation's")
    await state.put("sandbox", "conv-a", "current", "another capability's")
    assert await state.add("planning", "conv-a", "finished:2025", "old") is True
    await state.put("planning", "conv-a", "current", "replaced")

    assert await state.get("planning", "conv-a", "current") == "replaced"
    assert await state.get("planning", "conv-a", "missing") is None
    assert await state.get("planning", "conv-c", "current") is None
    assert await state.keys("planning", "conv-a") == ["current", "finished:2025", "finished:2026"]
    assert await state.items("planning", "conv-a") == {"current": "replaced", "finished:2025": "old",
                                                       "finished:2026": "[]"}
    assert await state.items("sandbox", "conv-a") == {"current": "another capability's"}
    assert await state.delete("planning", "conv-a", "finished:2025") == 1
    assert await state.keys("planning", "conv-a") == ["current", "finished:2026"]
    assert await state.get("planning", "conv-b", "current") == "the other conversation's"


async def test_a_waiting_run_of_no_ones_message_is_its_requesters_to_stop(store: Store) -> None:
    """A scheduled task's occurrence (and a background run's report) queues a message of no one, in a run its
    creator requested: a stop asks who asked each message, and that one is the creator's (no message joins such a
    run). So Ann's stop ends the whole run, and nothing is left waiting."""
    from gateway.store import repo
    from gateway.store.models import Message, Run

    conv = await _conversation(store)
    async with store.sessions() as s, s.begin():
        s.add(Run(id="sched1", conversation_id=conv.id, binding_id="web", agent_id="assistant", status=repo.QUEUED,
                  kind="scheduled", reason="", requester_person_id=ANN.person_id, requester_account="ann",
                  requester_name="Ann", requests=0, input_tokens=0, output_tokens=0, created_at=START))
        await s.flush()
        s.add(Message(conversation_id=conv.id, run_id="sched1", role="scheduled", text="the weekly report",
                      status=repo.QUEUED, sender_name="", created_at=START))
    senders = await store.queued_senders("sched1")
    assert senders == [("ann", ANN.person_id)]
    assert await store.stop_queued("sched1", conv.id, "stopped by Ann", senders) == "sched1"
    run = await store.run("sched1")
    assert run is not None and (run.status, run.reason) == (repo.STOPPED, "stopped by Ann")
    assert await store.conversations_with_queued_runs() == []
