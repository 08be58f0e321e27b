"""A run's end claims the next waiting conversation's run (SQLite, `repo.Handoff`): that claim waits in
memory until a slot is free, and nothing of it may be lost or doubled meanwhile.

The slot it waits for is the ending run's, given back only after that run's tail: a parked run's card
posted (a platform's budget or a 429 can hold it a minute or two), the Stop control taken off. The
claim is `running` in the database with a lease from its claim; the sweep renews the leases of what this
process holds, else requeues them as a dead process's."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

import pytest

from gateway.clock import ManualClock
from gateway.runs.queue import Scheduler
from gateway.store import repo
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import Claimed, ConversationRef, Store

from .conftest import pg_database, wait_for
from .test_store_driver import START, _say


async def test_a_claim_waiting_behind_a_long_tail_is_not_requeued_by_the_sweep(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'h.db'}")
    await migrate(engine)
    clock = ManualClock(START)
    store = Store(engine, clock=clock)
    a, b = [await store.create_conversation(ConversationRef("", f"web:local:{c}", "web", "web", "local", c, None, "dm"))
            for c in ("a", "b")]
    await _say(store, a, "e1", "first")
    waiting = await _say(store, b, "e2", "second")
    tail = asyncio.Event()
    in_flight: list[str] = []  # what the runner reports as running here (`Runner.running_ids`)
    seen: list[tuple[str, str | None]] = []  # each run executed, and its status in the store as it runs

    async def execute(claimed: Claimed) -> None:
        in_flight.append(claimed.run.id)
        try:
            row = await store.run(claimed.run.id)
            seen.append((claimed.run.id, row.status if row else None))
            if claimed.conversation.id == a.id:
                scheduler.wake(b.id)  # b's worker waits for the one slot
                await asyncio.sleep(0.05)
            await store.end_run(claimed.run.id, repo.FINISHED, reply="ok")
            if claimed.conversation.id == a.id:
                await tail.wait()  # after its end: its card's post waits out the platform's budget
        finally:
            in_flight.remove(claimed.run.id)

    scheduler = Scheduler(store, execute, concurrent_runs=1)
    try:
        scheduler.wake(a.id)

        async def handed() -> bool:  # a's end claimed b's run in its transaction; b's worker waits for the slot
            row = await store.run(waiting.run_id)
            return row is not None and row.status == repo.RUNNING

        await wait_for(handed, what="a's end to claim b's run")
        assert len(seen) == 1, "b's run started before a's slot was free"
        # The sweeps while a's tail lasts (each renews what the runner runs, then requeues lapsed leases).
        for _ in range(4):
            clock.advance(store.lease_seconds / 3)
            await store.renew_leases(list(in_flight))
            assert await store.requeue_interrupted() == [], "a claim this process holds was requeued as a dead one's"
        tail.set()
        await wait_for(lambda: len(seen) == 2 and not scheduler.active, what="b's run")
        assert seen[1] == (waiting.run_id, repo.RUNNING), seen
        ended = await store.run(waiting.run_id)
        assert ended is not None and ended.status == repo.FINISHED
    finally:
        tail.set()
        await scheduler.cancel()
        await engine.dispose()


async def _one_slot_and_a_waiter(tmp_path: Path, name: str) -> tuple[Store, ConversationRef, ConversationRef, str]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / name}")
    await migrate(engine)
    store = Store(engine, clock=ManualClock(START))
    a, b = [await store.create_conversation(ConversationRef("", f"web:local:{c}", "web", "web", "local", c, None, "dm"))
            for c in ("a", "b")]
    await _say(store, a, "e1", "first")
    waiting = await _say(store, b, "e2", "second")
    return store, a, b, waiting.run_id


async def test_a_parked_run_holds_its_conversation_against_an_ends_claim(tmp_path: Path) -> None:
    """b's first run waits on an approval card, its next message behind it: a's end claims nothing there."""
    store, a, b, parked_id = await _one_slot_and_a_waiter(tmp_path, "p.db")
    assert (await store.claim_next_run(b.id)) is not None
    await store.end_run(parked_id, repo.PARKED, state="[]")
    behind = await _say(store, b, "e3", "and then?")
    ran: list[str] = []

    async def execute(claimed: Claimed) -> None:
        ran.append(claimed.run.id)
        if claimed.conversation.id == a.id:
            scheduler.wake(b.id)
            await asyncio.sleep(0.05)  # b's worker waits for the one slot
        await store.end_run(claimed.run.id, repo.FINISHED, reply="ok")

    scheduler = Scheduler(store, execute, concurrent_runs=1)
    try:
        scheduler.wake(a.id)
        await wait_for(lambda: ran and not scheduler.active, what="a's run, then b's worker finding nothing to run")
        assert len(ran) == 1
        queued = await store.run(behind.run_id)
        assert queued is not None and queued.status == repo.QUEUED
        assert (await store.run(parked_id)).status == repo.PARKED  # type: ignore[union-attr]
    finally:
        await scheduler.cancel()
        await store.engine.dispose()


async def test_a_claim_made_by_an_end_and_killed_before_it_ran_is_answered_once_after_a_restart(
        tmp_path: Path) -> None:
    """The process dies after a's end committed b's claim, before b's worker started it: the file says b's
    run is running. The next start puts it back in the queue, and it runs once, with its message."""
    store, a, b, waiting_id = await _one_slot_and_a_waiter(tmp_path, "k.db")
    killed = asyncio.Event()

    async def execute(claimed: Claimed) -> None:
        scheduler.wake(b.id)
        await asyncio.sleep(0.05)
        await store.end_run(claimed.run.id, repo.FINISHED, reply="ok")
        killed.set()
        await asyncio.Event().wait()  # the process is gone: nothing after this runs

    scheduler = Scheduler(store, execute, concurrent_runs=1)
    scheduler.wake(a.id)
    await killed.wait()
    await scheduler.cancel()
    assert (await store.run(waiting_id)).status == repo.RUNNING  # type: ignore[union-attr]
    await store.engine.dispose()

    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'k.db'}")
    again = Store(engine, clock=ManualClock(START))
    ran: list[tuple[str, list[str]]] = []

    async def execute_again(claimed: Claimed) -> None:
        ran.append((claimed.run.id, [line.text for line in claimed.prompt]))
        await again.end_run(claimed.run.id, repo.FINISHED, reply="ok")

    restarted = Scheduler(again, execute_again, concurrent_runs=1)
    try:
        for conversation_id in await again.requeue_interrupted(at_start=True):
            restarted.wake(conversation_id)
        await wait_for(lambda: ran and not restarted.active, what="b's run after the restart")
        assert ran == [(waiting_id, ["second"])]
        assert {m.status for m in await again.messages(b.id)} == {"processed", "final"}
    finally:
        await restarted.cancel()
        await engine.dispose()


# What makes the next conversation's claim fail inside a run's end, done to the file from outside (an admin's
# `sqlite3` shell), and how it is mended: its message's text made bytes that are no UTF-8 (sqlite3 cannot read
# the row back), or a trigger that refuses the claim's update of its message (a constraint).
FAULTS = {
    "unreadable": ("UPDATE messages SET text = CAST(X'C328FF' AS TEXT) WHERE conversation_id = :b",
                   "UPDATE messages SET text = 'second' WHERE conversation_id = :b"),
    "refused": ("CREATE TRIGGER refuse_claim BEFORE UPDATE OF status ON messages"
                " WHEN NEW.status = 'processing' AND NEW.conversation_id = :b BEGIN SELECT RAISE(ABORT, 'refused'); END",
                "DROP TRIGGER refuse_claim"),
}


def _outside(path: Path, sql: str, b: str) -> None:
    with sqlite3.connect(path, timeout=5) as db:
        # A trigger's text cannot take a parameter: the id goes in quoted (ours, hex).
        db.execute(sql.replace(":b", f"'{b}'"))
    db.close()


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_a_claim_that_fails_does_not_fail_the_end_it_rides_on(tmp_path: Path, fault: str) -> None:
    """b's row goes bad while a runs: a's end, which claims b's run in its transaction, is recorded with its
    answer all the same, and b's run (its row mended meanwhile) is claimed by b's worker and runs once."""
    store, a, b, waiting_id = await _one_slot_and_a_waiter(tmp_path, "f.db")
    spoil, mend = FAULTS[fault]
    _outside(tmp_path / "f.db", spoil, b.id)
    ended, tail = asyncio.Event(), asyncio.Event()
    ran: list[str] = []

    async def execute(claimed: Claimed) -> None:
        ran.append(claimed.run.id)
        await asyncio.sleep(0)  # b's worker's first step: it finds the slot taken and waits for it
        try:
            await store.end_run(claimed.run.id, repo.FINISHED, reply=f"answer {len(ran)}")
        finally:
            if claimed.conversation.id == a.id:
                ended.set()
                await tail.wait()  # after its end: its card's post waits out the platform's budget

    scheduler = Scheduler(store, execute, concurrent_runs=1)
    try:
        scheduler.wake(a.id)
        scheduler.wake(b.id)
        await ended.wait()
        [first] = ran
        row = await store.run(first)
        assert row is not None and row.status == repo.FINISHED, "the end failed with the claim it carried"
        assert [(m.role, m.text, m.status) for m in await store.messages(a.id)] == [
            ("user", "first", "processed"), ("assistant", "answer 1", "final")]

        _outside(tmp_path / "f.db", mend, b.id)
        tail.set()
        await wait_for(lambda: len(ran) == 2 and not scheduler.active, what="b's run")
        assert ran == [first, waiting_id]
        done = await store.run(waiting_id)
        assert done is not None and done.status == repo.FINISHED
        assert [(m.role, m.text) for m in await store.messages(b.id)] == [("user", "second"), ("assistant", "answer 2")]
    finally:
        tail.set()
        await scheduler.cancel()
        await store.engine.dispose()


async def test_a_run_whose_claim_fails_every_time_fails_once_and_its_worker_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """b's message is made unreadable from outside while a runs, and stays so: b's claim raises every time. After
    its first failure it waits for the sweep; at the second its run ends `failed` once, with one error line naming the run and the error's type (never the row's text); b's
    later message runs, a's conversation is not held up, and the sweep's wake finds nothing to fail again."""
    store, a, b, poisoned = await _one_slot_and_a_waiter(tmp_path, "u.db")
    spoil, _mend = FAULTS["unreadable"]
    _outside(tmp_path / "u.db", spoil, b.id)
    ran: list[tuple[str, list[str]]] = []

    async def execute(claimed: Claimed) -> None:
        ran.append((claimed.conversation.id, [line.text for line in claimed.prompt]))
        if claimed.conversation.id == a.id:
            scheduler.wake(b.id)  # b's worker waits for the one slot
            await asyncio.sleep(0)
        await store.end_run(claimed.run.id, repo.FINISHED, reply=f"answer {len(ran)}")

    scheduler = Scheduler(store, execute, concurrent_runs=1)
    caplog.set_level(logging.INFO)
    try:
        scheduler.wake(a.id)
        await wait_for(lambda: [r for r in caplog.records if r.levelno == logging.WARNING
                                and "tried again at the next sweep" in r.getMessage()], what="b's first failed claim")
        await wait_for(lambda: not scheduler.active, what="the workers to settle")
        assert (await store.run(poisoned)).status == repo.QUEUED  # type: ignore[union-attr]
        for conversation_id in await store.conversations_with_queued_runs():  # the sweep's wake: it fails again
            scheduler.wake(conversation_id)

        async def failed() -> bool:
            row = await store.run(poisoned)
            return row is not None and row.status == repo.FAILED

        await wait_for(failed, what="b's unreadable run to end failed")
        await wait_for(lambda: not scheduler.active, what="the workers to settle")
        assert ran == [(a.id, ["first"])]
        row = await store.run(poisoned)
        assert row is not None and row.reason == "could not be claimed: OperationalError"
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [f"run {poisoned} could not be claimed (OperationalError): it ended failed, its messages set aside"]
        assert not [r for r in caplog.records if "\\xc3" in r.getMessage() or "decode" in r.getMessage()]

        for conversation_id in await store.conversations_with_queued_runs():  # the sweep's wake
            scheduler.wake(conversation_id)
        later = await _say(store, b, "e3", "are you there?")
        scheduler.wake(b.id)
        await wait_for(lambda: len(ran) == 2 and not scheduler.active, what="b's later message")
        assert ran[1] == (b.id, ["are you there?"])
        done = await store.run(later.run_id)
        assert done is not None and done.status == repo.FINISHED
        assert await store.conversations_with_queued_runs() == []
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == errors  # once
    finally:
        await scheduler.cancel()
        await store.engine.dispose()


async def test_a_claim_that_loses_a_deadlock_on_postgresql_is_tried_again_not_failed() -> None:
    """A claim on PostgreSQL is the victim of a deadlock (another session holds b's run row and then waits for
    b's conversation lock, which the claim holds): the server aborts the claim with 40P01, once. That is a busy
    database, not a claim that fails every time: the run is claimed again and answered, never ended `failed`
    with its message set aside (unanswered for good)."""
    import asyncpg

    async with pg_database() as url:
        engine = create_engine(url)
        await migrate(engine)
        store = Store(engine, clock=ManualClock(START))
        b = await store.create_conversation(ConversationRef("", "web:local:b", "web", "web", "local", "b", None, "dm"))
        waiting = await _say(store, b, "e1", "second")
        ran: list[list[str]] = []

        async def execute(claimed: Claimed) -> None:
            ran.append([line.text for line in claimed.prompt])
            await store.end_run(claimed.run.id, repo.FINISHED, reply="answer")

        other = await asyncpg.connect(url.replace("postgresql+asyncpg", "postgresql"))
        scheduler = Scheduler(store, execute, concurrent_runs=1)
        try:
            tx = other.transaction()
            await tx.start()
            # This session waits longer before it looks for a deadlock: the claim's session finds it, and loses.
            await other.execute("SET LOCAL deadlock_timeout = '20s'")
            await other.execute("SELECT 1 FROM runs WHERE id = $1 FOR UPDATE", waiting.run_id)
            scheduler.wake(b.id)

            async def claim_waits() -> bool:  # the claim holds b's lock and waits for the run's row
                return bool(await other.fetchval(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"))

            await wait_for(claim_waits, what="the claim to wait for the run's row")
            await other.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", b.id)  # the deadlock
            await tx.rollback()

            async def ended() -> bool:
                row = await store.run(waiting.run_id)
                return row is not None and row.status in repo.ENDED

            await wait_for(ended, what="b's run to end")
            row = await store.run(waiting.run_id)
            assert row is not None and (row.status, row.reason) == (repo.FINISHED, "")
            assert ran == [["second"]]
        finally:
            await other.close()
            await scheduler.cancel()
            await engine.dispose()


async def test_a_claim_that_fails_once_leaves_its_run_queued_for_the_next_sweep(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An operator's session breaks b's claim for a moment (a trigger refuses it, then is dropped): one failed
    claim is told in a warning, and the run waits for the next sweep, which answers it. It used to end `failed`
    at once, its message set aside, never answered."""
    store, a, b, waiting_id = await _one_slot_and_a_waiter(tmp_path, "o.db")
    spoil, mend = FAULTS["refused"]
    _outside(tmp_path / "o.db", spoil, b.id)
    ran: list[list[str]] = []

    async def execute(claimed: Claimed) -> None:
        ran.append([line.text for line in claimed.prompt])
        await store.end_run(claimed.run.id, repo.FINISHED, reply="answer")

    scheduler = Scheduler(store, execute, concurrent_runs=1)
    caplog.set_level(logging.INFO)
    try:
        scheduler.wake(b.id)
        await wait_for(lambda: not scheduler.active, what="b's worker to give up for now")
        row = await store.run(waiting_id)
        assert row is not None and row.status == repo.QUEUED
        _outside(tmp_path / "o.db", mend, b.id)
        for conversation_id in await store.conversations_with_queued_runs():  # the sweep's wake
            scheduler.wake(conversation_id)
        await wait_for(lambda: ran, what="b's run to be answered")
        await wait_for(lambda: not scheduler.active, what="the workers to settle")
        row = await store.run(waiting_id)
        assert row is not None and row.status == repo.FINISHED
        assert ["second"] in ran
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == [
            f"conversation {b.id}: its next run could not be claimed (IntegrityError); tried again at the next sweep"]
    finally:
        await scheduler.cancel()
        await store.engine.dispose()
