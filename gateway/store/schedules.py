"""Scheduled tasks in the store: what fires on its own, and the claim that makes each occurrence fire once.

Firing is one transaction per sweep: the due tasks are locked (on PostgreSQL `FOR UPDATE SKIP
LOCKED`, so two replicas' sweeps divide them instead of waiting on each other), each occurrence is
claimed by inserting its (task, due time) row — the primary key refuses a second claim on any
replica — and a queued run of kind `scheduled` with its message (role `scheduled`) is added, and
the task's next occurrence written. The queue does the rest, as for a background run's report:
the run waits behind a turn in flight and behind a parked approval, and runs on whichever replica
claims it.

Missed occurrences (the daemon was down): a one-shot runs once, late, and says so; a recurring
task runs only its latest missed occurrence, once, and the ones before it count as missed. With
`catch_up` off a late occurrence is skipped (counted missed) instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from bindings.cron import latest_until, next_after
from gateway.clock import new_id
from gateway.store import driver
from gateway.store.detached import Rows
from gateway.store.models import Message, Run, ScheduledTask, ScheduleOccurrence
from gateway.store.repo import QUEUED, Store

if TYPE_CHECKING:
    from sqlalchemy.dialects import postgresql, sqlite

ACTIVE, PAUSED, CANCELLED, DONE = "active", "paused", "cancelled", "done"
LIVE = (ACTIVE, PAUSED)  # what lists and limits count
SCHEDULED = "scheduled"  # the kind of run, and the role of its message, that a task's occurrence queues
CHAT, ADMIN = "chat", "admin"
FIRED, MISSED = "fired", "missed"
# An occurrence fired within this of its time is on time (the sweep runs every 20 s); later is late.
ON_TIME = timedelta(minutes=2)
MISSED_COUNTED = 10_000  # slots a long outage skipped are counted up to this many
_ROWS = Rows(ScheduledTask)  # read on the driver, detached (`gateway.store.detached`)


@dataclass(frozen=True, slots=True)
class NewTask:
    conversation_id: str
    binding_id: str
    task: str
    cron: str | None
    at: datetime | None
    timezone: str
    creator_person_id: str | None
    creator_account: str | None
    creator_name: str
    catch_up: bool = True
    origin: str = CHAT
    name: str = ""


@dataclass(frozen=True, slots=True)
class Fired:
    """One occurrence claimed by this sweep: queued as `run_id`, or skipped (`run_id` empty)."""

    task: ScheduledTask
    due_at: datetime
    run_id: str
    late: bool
    missed: int  # earlier occurrences it stands in for (a recurring task after an outage)


Card = Callable[[ScheduledTask, datetime, bool, int], str]  # (task, due, late, missed) -> the run's message


def first_due(cron: str | None, at: datetime | None, zone: str, now: datetime) -> datetime | None:
    """When a new task fires first: its instant, or its cron's next occurrence after now."""
    if cron is not None:
        return next_after(cron, zone, now)
    return at


class ScheduleStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._sessions = store.sessions
        self._clock = store.clock

    async def create(self, new: NewTask, *, per_person: int, per_conversation: int) -> ScheduledTask | str:
        """Record a task, or say which limit it would pass. Counted and inserted in one transaction,
        under a lock on PostgreSQL, so two replicas cannot both take the last slot."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            if self._store.shared:
                await s.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('scheduled_tasks', 0))"))
            live = (ScheduledTask.status.in_(LIVE), ScheduledTask.origin == CHAT)
            if new.creator_person_id is not None:
                mine = await s.scalar(select(func.count()).select_from(ScheduledTask).where(
                    *live, ScheduledTask.creator_person_id == new.creator_person_id)) or 0
                if mine >= per_person:
                    return (f"you already have {mine} scheduled tasks, the most one person may have here; "
                            "cancel one (list_scheduled_tasks shows them) before adding another")
            here = await s.scalar(select(func.count()).select_from(ScheduledTask).where(
                *live, ScheduledTask.conversation_id == new.conversation_id)) or 0
            if here >= per_conversation:
                return (f"this conversation already has {here} scheduled tasks, the most one conversation may have; "
                        "cancel one before adding another")
            row = ScheduledTask(
                id=new_id(), conversation_id=new.conversation_id, binding_id=new.binding_id, origin=new.origin,
                name=new.name, task=new.task, cron=new.cron, at=new.at, timezone=new.timezone,
                catch_up=new.catch_up, status=ACTIVE, reason="",
                next_at=first_due(new.cron, new.at, new.timezone, now),
                creator_person_id=new.creator_person_id, creator_account=new.creator_account,
                creator_name=new.creator_name, created_at=now, updated_at=now)
            s.add(row)
            return row

    async def get(self, task_id: str) -> ScheduledTask | None:
        async with self._sessions() as s:
            return await s.get(ScheduledTask, task_id)

    async def find(self, prefix: str) -> list[ScheduledTask]:
        """Tasks whose id starts with `prefix` (people type the short id they were shown)."""
        if not prefix:
            return []
        async with self._sessions() as s:
            return list(await s.scalars(select(ScheduledTask).where(ScheduledTask.id.startswith(prefix, autoescape=True))
                                        .limit(2)))

    async def listed(self, *, conversation_id: str | None = None, statuses: Sequence[str] = LIVE,
                     origin: str | None = None) -> list[ScheduledTask]:
        q = select(ScheduledTask).where(ScheduledTask.status.in_(statuses))
        if conversation_id is not None:
            q = q.where(ScheduledTask.conversation_id == conversation_id)
        if origin is not None:
            q = q.where(ScheduledTask.origin == origin)
        async with self._sessions() as s:
            return list(await s.scalars(q.order_by(ScheduledTask.next_at, ScheduledTask.created_at)))

    async def set_status(self, task_id: str, status: str, *, reason: str = "",
                         only_from: Sequence[str] = LIVE) -> ScheduledTask | None:
        """Pause, resume or cancel; None when the task is not in a state it can change from. A resumed
        recurring task is due next after now (what it missed while paused is not run)."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            row = await s.get(ScheduledTask, task_id, with_for_update=self._store.shared)
            if row is None or row.status not in only_from:
                return None
            row.status, row.reason, row.updated_at = status, reason, now
            if status == ACTIVE and row.cron is not None:
                row.next_at = next_after(row.cron, row.timezone, now)
            return row

    async def occurrences(self, task_id: str) -> list[ScheduleOccurrence]:
        async with self._sessions() as s:
            return list(await s.scalars(select(ScheduleOccurrence).where(ScheduleOccurrence.task_id == task_id)
                                        .order_by(ScheduleOccurrence.due_at)))

    async def due(self, now: datetime, limit: int = 100) -> list[ScheduledTask]:
        """Active tasks whose next occurrence has come (a read; `fire` claims)."""
        def program(q: driver.Statements) -> driver.Program[list[ScheduledTask]]:  # every tick asks: on the driver
            rows = yield q.all(f"SELECT {_ROWS.columns} FROM scheduled_tasks WHERE status = :active AND next_at <= :now"
                               " ORDER BY next_at LIMIT :n", active=ACTIVE, now=now, n=limit)
            return [_ROWS.of(q, row) for row in rows]

        return await driver.read(self._store.engine, program)

    async def fire(self, task_ids: Sequence[str], *, agent_for: Callable[[str], str | None], card: Card) -> list[Fired]:
        """Claim the due occurrence of each of `task_ids` still due and queue its run, in one transaction.
        A task another replica holds (locked) or fired meanwhile is left out."""
        if not task_ids:
            return []
        now = self._clock.now()
        fired: list[Fired] = []
        async with self._sessions() as s, s.begin():
            q = (select(ScheduledTask).where(ScheduledTask.id.in_(task_ids), ScheduledTask.status == ACTIVE,
                                             ScheduledTask.next_at <= now).order_by(ScheduledTask.next_at))
            if self._store.shared:
                q = q.with_for_update(skip_locked=True)
            for task in list(await s.scalars(q)):
                one = await self._fire_one(s, task, now, agent_for, card)
                if one is not None:
                    fired.append(one)
        return fired

    async def _fire_one(self, s: AsyncSession, task: ScheduledTask, now: datetime,
                        agent_for: Callable[[str], str | None], card: Card) -> Fired | None:
        assert task.next_at is not None
        if task.cron is None:
            due, missed, following = task.next_at, 0, None
        else:
            due = latest_until(task.cron, task.timezone, now)
            missed = _between(task.cron, task.timezone, task.next_at, due)
            following = next_after(task.cron, task.timezone, due)
        late = now - due > ON_TIME
        task.next_at, task.updated_at = following, now
        if following is None:
            task.status = DONE
        agent = agent_for(task.binding_id)
        skip = (late and not task.catch_up) or agent is None
        run_id = "" if skip else new_id()
        claimed = await s.execute(_insert(self._store, ScheduleOccurrence).values(
            task_id=task.id, due_at=due, outcome=MISSED if skip else FIRED, run_id=run_id or None, late=late,
            claimed_by=self._store.owner, claimed_at=now).on_conflict_do_nothing())
        if claimed.rowcount != 1:  # fired already (a replica that read it before our lock): once is enough
            return None
        if run_id:
            task.last_run_id = run_id
            s.add(Run(id=run_id, conversation_id=task.conversation_id, binding_id=task.binding_id, agent_id=agent,
                      status=QUEUED, kind=SCHEDULED, reason="", requester_person_id=task.creator_person_id,
                      requester_account=task.creator_account, requester_name=task.creator_name,
                      requests=0, input_tokens=0, output_tokens=0, created_at=now))
            await s.flush()  # the run before its message (the message's run id names it)
            s.add(Message(conversation_id=task.conversation_id, run_id=run_id, role=SCHEDULED,
                          text=card(task, due, late, missed), status=QUEUED, sender_name="", created_at=now))
        return Fired(task, due, run_id, late, missed + (1 if skip else 0))

    async def pause_if_active(self, task_id: str, reason: str) -> bool:
        """Pause a task that lost its footing (its creator's access, its binding); True for the one caller
        that did it (so its owner is told once, whichever replica saw it first)."""
        async with self._sessions() as s, s.begin():
            changed = await s.execute(update(ScheduledTask).where(
                ScheduledTask.id == task_id, ScheduledTask.status == ACTIVE)
                .values(status=PAUSED, reason=reason, updated_at=self._clock.now()))
            return changed.rowcount == 1

    async def sync_admin(self, wanted: dict[tuple[str, str], NewTask]) -> tuple[int, int, int]:
        """Make the admin tasks those the binding files say, by (binding, name): new ones added, changed
        ones updated (due anew), removed ones cancelled. A paused one stays paused. (added, changed, removed)."""
        now = self._clock.now()
        added = changed = removed = 0
        if not wanted and not await self._any_admin():
            return added, changed, removed  # no admin tasks, none wanted: no write transaction (every start)
        async with self._sessions() as s, s.begin():
            if self._store.shared:  # two replicas reloading at once apply one after the other
                await s.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('scheduled_tasks:admin', 0))"))
            have = {(t.binding_id, t.name): t for t in await s.scalars(select(ScheduledTask).where(
                ScheduledTask.origin == ADMIN, ScheduledTask.status.in_(LIVE)))}
            for key, new in wanted.items():
                row = have.pop(key, None)
                if row is None:
                    s.add(ScheduledTask(
                        id=new_id(), conversation_id=new.conversation_id, binding_id=new.binding_id, origin=ADMIN,
                        name=new.name, task=new.task, cron=new.cron, at=new.at, timezone=new.timezone,
                        catch_up=new.catch_up, status=ACTIVE, reason="",
                        next_at=first_due(new.cron, new.at, new.timezone, now), creator_person_id=None,
                        creator_account=None, creator_name=new.creator_name, created_at=now, updated_at=now))
                    added += 1
                elif (row.task, row.cron, row.timezone, row.conversation_id, row.catch_up) != \
                        (new.task, new.cron, new.timezone, new.conversation_id, new.catch_up):
                    row.task, row.cron, row.timezone, row.catch_up = new.task, new.cron, new.timezone, new.catch_up
                    row.conversation_id, row.updated_at = new.conversation_id, now
                    row.next_at = first_due(new.cron, new.at, new.timezone, now)
                    changed += 1
            for row in have.values():
                row.status, row.reason, row.updated_at = CANCELLED, "removed from its binding file", now
                removed += 1
        return added, changed, removed

    async def _any_admin(self) -> bool:
        def program(q: driver.Statements) -> driver.Program[bool]:
            row = yield q.one("SELECT 1 FROM scheduled_tasks WHERE origin = :admin AND status IN (:a, :p) LIMIT 1",
                              admin=ADMIN, a=LIVE[0], p=LIVE[1])
            return row is not None

        return await driver.read(self._store.engine, program)


def _between(cron: str, zone: str, start: datetime, end: datetime) -> int:
    """Occurrences from `start` (included) to `end` (excluded), counted up to MISSED_COUNTED."""
    n, at = 0, start
    while at < end and n < MISSED_COUNTED:
        n += 1
        at = next_after(cron, zone, at)
    return n


def _insert(store: Store, table: type[ScheduleOccurrence]) -> postgresql.Insert | sqlite.Insert:
    # Both have ON CONFLICT DO NOTHING. Imported here: the other engine's dialect is 2 MiB a deployment never uses.
    if store.shared:
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)
