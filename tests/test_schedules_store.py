"""Scheduled tasks in the store: each occurrence claimed once (two replicas on one PostgreSQL), 09:00 local
on both sides of a DST change, and what an outage missed run once (or skipped)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import func, select

from bindings.cron import latest_until, next_after
from bindings.loader import load_config
from gateway.clock import ManualClock
from gateway.runs.scheduled import Schedules, occurrence_card
from gateway.store import repo
from gateway.store.engine import create_engine, migrate
from gateway.store.models import Run, ScheduleOccurrence
from gateway.store.schedules import CHAT, SCHEDULED, NewTask, ScheduleStore

from .conftest import database_url, write_config

UTC = timezone.utc
WARSAW = "Europe/Warsaw"


@contextlib.asynccontextmanager
async def store_on(url: str, clock: ManualClock, owner: str) -> AsyncIterator[repo.Store]:
    engine = create_engine(url)
    await migrate(engine)
    store = repo.Store(engine, clock, owner=owner)
    try:
        yield store
    finally:
        await store.close()


def set_time(clock: ManualClock, when: datetime) -> None:
    clock.advance((when - clock.now()).total_seconds())


async def a_conversation(store: repo.Store, thread: str = "1.000") -> str:
    ref = await store.create_conversation(repo.ConversationRef("", f"slack:T1:C1:{thread}", "slack", "slack", "T1",
                                                               "C1", thread, "channel"))
    return ref.id


def task(conversation_id: str, *, cron: str | None = None, at: datetime | None = None, zone: str = "UTC",
         catch_up: bool = True) -> NewTask:
    return NewTask(conversation_id=conversation_id, binding_id="slack", task="Post the open incidents", cron=cron,
                   at=at, timezone=zone, creator_person_id=None, creator_account="U1", creator_name="alice",
                   catch_up=catch_up, origin=CHAT)


async def fire_due(db: ScheduleStore, now: datetime) -> list[tuple[str, datetime, str, bool, int]]:
    due = await db.due(now)
    fired = await db.fire([t.id for t in due], agent_for=lambda b: "assistant", card=occurrence_card)
    return [(f.task.id, f.due_at, f.run_id, f.late, f.missed) for f in fired]


@pytest.mark.parametrize("when, expected", [
    # Spring forward on 29 March 2026: 09:00 in Warsaw is 08:00 UTC before, 07:00 UTC after.
    (datetime(2026, 3, 20, tzinfo=UTC), ["2026-03-23T08:00", "2026-03-30T07:00", "2026-04-06T07:00"]),
    # Fall back on 25 October 2026: 07:00 UTC before, 08:00 UTC after.
    (datetime(2026, 10, 15, tzinfo=UTC), ["2026-10-19T07:00", "2026-10-26T08:00", "2026-11-02T08:00"]),
])
async def test_monday_nine_in_warsaw_fires_at_nine_local_across_a_dst_change(tmp_path: Path, when: datetime,
                                                                           expected: list[str]) -> None:
    clock = ManualClock(when)
    async with store_on(f"sqlite+aiosqlite:///{tmp_path / 'g.db'}", clock, "one") as store:
        db = ScheduleStore(store)
        made = await db.create(task(await a_conversation(store), cron="0 9 * * MON", zone=WARSAW),
                               per_person=10, per_conversation=10)
        assert not isinstance(made, str)
        fired: list[datetime] = []
        for _ in expected:
            row = await db.get(made.id)
            assert row is not None and row.next_at is not None
            set_time(clock, row.next_at - timedelta(seconds=1))
            assert await fire_due(db, clock.now()) == [], "not a second early"
            set_time(clock, row.next_at + timedelta(seconds=20))
            [(_, due, run_id, late, missed)] = await fire_due(db, clock.now())
            assert run_id and not late and not missed
            fired.append(due)
        assert [d.astimezone(UTC).strftime("%Y-%m-%dT%H:%M") for d in fired] == expected
        assert {d.astimezone(ZoneInfo(WARSAW)).strftime("%a %H:%M") for d in fired} == \
            {"Mon 09:00"}


def test_a_time_the_spring_change_skips_fires_once_after_the_gap() -> None:
    # 02:30 does not exist in Warsaw on 29 March 2026; the daily task runs at 03:00 that day, once.
    day = [next_after("30 2 * * *", WARSAW, datetime(2026, 3, 28, 12, tzinfo=UTC))]
    day.append(next_after("30 2 * * *", WARSAW, day[0]))
    assert [d.isoformat() for d in day] == ["2026-03-29T01:00:00+00:00", "2026-03-30T00:30:00+00:00"]
    assert latest_until("0 9 * * *", "UTC", datetime(2026, 3, 2, 9, tzinfo=UTC)) == datetime(2026, 3, 2, 9, tzinfo=UTC)
    # The last second of a minute, with its fraction: never the next minute (in the future), whatever the zone.
    for zone in ("UTC", WARSAW):
        for until in (datetime(2026, 3, 2, 9, 16, 59, 500000, tzinfo=UTC), datetime(2026, 3, 2, 9, 16, 59, 999999, tzinfo=UTC)):
            assert latest_until("* * * * *", zone, until) == datetime(2026, 3, 2, 9, 16, tzinfo=UTC), (zone, until)


async def test_an_outage_runs_the_latest_missed_occurrence_once_or_skips_it(tmp_path: Path) -> None:
    clock = ManualClock(datetime(2026, 3, 2, 7, 30, tzinfo=UTC))
    async with store_on(f"sqlite+aiosqlite:///{tmp_path / 'g.db'}", clock, "one") as store:
        db = ScheduleStore(store)
        conv = await a_conversation(store)
        hourly = await db.create(task(conv, cron="0 * * * *"), per_person=10, per_conversation=10)
        skipping = await db.create(task(conv, cron="0 * * * *", catch_up=False), per_person=10, per_conversation=10)
        assert not isinstance(hourly, str) and not isinstance(skipping, str)
        set_time(clock, datetime(2026, 3, 2, 12, 10, tzinfo=UTC))  # 08:00 … 12:00 passed while down
        fired = {t: (due, run_id, late, missed) for t, due, run_id, late, missed in await fire_due(db, clock.now())}
        due, run_id, late, missed = fired[hourly.id]
        assert due == datetime(2026, 3, 2, 12, tzinfo=UTC) and run_id and late and missed == 4
        due, run_id, late, missed = fired[skipping.id]
        assert due == datetime(2026, 3, 2, 12, tzinfo=UTC) and not run_id and missed == 5
        for made in (hourly, skipping):
            row = await db.get(made.id)
            assert row is not None and row.next_at == datetime(2026, 3, 2, 13, tzinfo=UTC)
        async with store.sessions() as s:
            assert await s.scalar(select(func.count()).select_from(Run).where(Run.kind == SCHEDULED)) == 1


@pytest.mark.postgres
async def test_two_replicas_on_one_postgresql_run_each_of_100_occurrences_once(tmp_path: Path) -> None:
    start = datetime(2026, 3, 2, 8, 0, 30, tzinfo=UTC)
    clock = ManualClock(start)
    cfg = load_config(write_config(tmp_path / "config", agents={"assistant": {
        "name": "A", "model": "demo", "capabilities": [{"id": "schedules"}]}},
        bindings={"slack": {"platform": "slack", "agent": "assistant",
                            "slack": {"bot_token": "env:SLACK_BOT", "app_token": "env:SLACK_APP"}}}))
    async with database_url("postgresql", tmp_path) as url, \
            store_on(url, clock, "replica-a") as a, store_on(url, clock, "replica-b") as b:
        woken: dict[str, list[str]] = {"replica-a": [], "replica-b": []}

        def replica(store: repo.Store) -> Schedules:
            return Schedules(store, lambda: cfg, woken[store.owner].append, lambda *a, **k: None,
                             lambda outcome, n: None, sweep_every=60)

        ra, rb = replica(a), replica(b)
        tasks = []
        for i in range(10):  # ten tasks every minute, for ten minutes: 100 occurrences
            made = await ra.db.create(task(await a_conversation(a, f"{i}.000"), cron="* * * * *"),
                                      per_person=100, per_conversation=100)
            assert not isinstance(made, str)
            tasks.append(made.id)
        for minute in range(1, 11):
            set_time(clock, start + timedelta(minutes=minute))
            # Both replicas sweep at once, twice each: whoever locks a task first fires it.
            await asyncio.gather(ra.sweep(), rb.sweep(), rb.sweep(), ra.sweep())
        async with a.sessions() as s:
            claims = list(await s.execute(select(ScheduleOccurrence.task_id, ScheduleOccurrence.due_at,
                                                 ScheduleOccurrence.claimed_by, ScheduleOccurrence.run_id)))
            runs = list(await s.scalars(select(Run).where(Run.kind == SCHEDULED)))
        assert len(claims) == 100 and len({(t, d) for t, d, _, _ in claims}) == 100, "0 doubled"
        expected = {(t, start.replace(second=0) + timedelta(minutes=m)) for t in tasks for m in range(1, 11)}
        assert {(t, d) for t, d, _, _ in claims} == expected, "0 lost"
        assert len(runs) == 100 and {r.id for r in runs} == {run for _, _, _, run in claims}
        assert len(woken["replica-a"]) + len(woken["replica-b"]) == 100


async def test_pruning_drops_old_claims_and_ended_tasks_and_an_active_task_never_fires_twice(tmp_path: Path) -> None:
    from gateway.store.retention import Retention, prune

    clock = ManualClock(datetime(2026, 3, 2, 8, 0, 30, tzinfo=UTC))
    async with store_on(f"sqlite+aiosqlite:///{tmp_path / 'g.db'}", clock, "one") as store:
        db = ScheduleStore(store)
        conv = await a_conversation(store)
        daily = await db.create(task(conv, cron="0 9 * * *"), per_person=10, per_conversation=10)
        once = await db.create(task(conv, at=datetime(2026, 3, 2, 9, tzinfo=UTC)), per_person=10, per_conversation=10)
        assert not isinstance(daily, str) and not isinstance(once, str)
        set_time(clock, datetime(2026, 3, 2, 9, 0, 10, tzinfo=UTC))
        assert len(await fire_due(db, clock.now())) == 2
        deleted = await prune(store, Retention(runs_days=1), clock.now() + timedelta(days=2), pause=0)
        # The claims first, then the one-shot that is done (the daily task stays: it is active).
        assert deleted["schedule_occurrences"] == 2 and deleted["scheduled_tasks"] == 1
        assert await db.get(once.id) is None
        assert await fire_due(db, clock.now()) == [], "the pruned claim's occurrence is past: not run again"
        row = await db.get(daily.id)
        assert row is not None and row.status == "active" and row.next_at == datetime(2026, 3, 3, 9, tzinfo=UTC)
