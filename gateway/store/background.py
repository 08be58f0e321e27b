"""Background runs in the store: what must outlive the process that started one.

A background run is a row of its own (`background_runs`) under its conversation, with the
transcript saved as it goes, so a restart can end it as `partial` with what it did. Its end and
its report-back are one transaction: the row's outcome, a queued run of kind `report` and the
report itself as that run's message (role `report`). The queue does the rest: the report run
waits behind a turn in flight and behind a parked approval like any queued run, on whichever
replica claims it, and nothing is lost in between.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.clock import new_id
from gateway.store import driver
from gateway.store.detached import Rows
from gateway.store.models import BackgroundRun, CapabilityStateRow, Message, Run
from gateway.store.repo import FINISHED as FINISHED_RUN
from gateway.store.repo import QUEUED, Store

RUNNING = "running"
FINISHED, FAILED, STOPPED, PARTIAL = "finished", "failed", "stopped", "partial"
REPORT = "report"  # the kind of run, and the role of the message, that carry a report back
# A running run's inbox (what its parent tells it: capabilities/delegate_inbox.py), capability state under
# its id; it goes when the run ends, however it ends, with a question's turn nobody has read yet.
INBOX = "subagents.inbox"

_ROWS = Rows(BackgroundRun)  # read on the driver, detached (`gateway.store.detached`)


@dataclass(frozen=True, slots=True)
class NewBackground:
    """What the turn that starts a background run knows of it."""

    conversation_id: str
    parent_run_id: str
    binding_id: str
    agent_id: str
    delegate: str
    kind: str
    prompt: str
    requester_person_id: str | None
    requester_account: str | None
    requester_name: str


@dataclass(frozen=True, slots=True)
class Usage:
    requests: int
    input_tokens: int
    output_tokens: int


class BackgroundStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._sessions = store.sessions
        self._clock = store.clock

    async def open(self, new: NewBackground, *, per_conversation: int, per_gateway: int) -> str:
        """Record a new running background run; returns its id, or "" when a limit is reached (the
        caller says which, from `in_flight`). Counted and inserted in one transaction, under a lock on
        PostgreSQL, so two replicas cannot both take the last slot."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            if self._store.shared:
                await s.execute(text("SELECT pg_advisory_xact_lock(hashtextextended('background_runs', 0))"))
            everywhere = await s.scalar(select(func.count()).select_from(BackgroundRun)
                                        .where(BackgroundRun.status == RUNNING)) or 0
            here = await s.scalar(select(func.count()).select_from(BackgroundRun).where(
                BackgroundRun.status == RUNNING, BackgroundRun.conversation_id == new.conversation_id)) or 0
            if here >= per_conversation or everywhere >= per_gateway:
                return ""
            run_id = new_id()
            s.add(BackgroundRun(
                id=run_id, conversation_id=new.conversation_id, parent_run_id=new.parent_run_id,
                binding_id=new.binding_id, agent_id=new.agent_id, delegate=new.delegate, kind=new.kind,
                prompt=new.prompt, status=RUNNING, reason="", answer="", transcript="[]",
                requester_person_id=new.requester_person_id, requester_account=new.requester_account,
                requester_name=new.requester_name, requests=0, input_tokens=0, output_tokens=0, created_at=now,
                lease_owner=self._store.owner, lease_expires=now + timedelta(seconds=self._store.lease_seconds),
            ))
            return run_id

    async def save_progress(self, run_id: str, transcript: str, usage: Usage) -> None:
        """What the run has done so far: a restart ends it as partial with this."""
        async with self._sessions() as s, s.begin():
            await s.execute(update(BackgroundRun).where(BackgroundRun.id == run_id, BackgroundRun.status == RUNNING)
                            .values(transcript=transcript, requests=usage.requests, input_tokens=usage.input_tokens,
                                    output_tokens=usage.output_tokens))

    async def end(self, run_id: str, status: str, *, reason: str, answer: str, report: str,
                  transcript: str | None = None, usage: Usage | None = None) -> BackgroundRun | None:
        """End a running background run and queue its report, in one transaction. None when it had
        already ended (another replica, or a stop and a finish racing): it reports once."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            row = await s.get(BackgroundRun, run_id, with_for_update=self._store.shared)
            if row is None or row.status != RUNNING:
                return None
            row.status, row.reason, row.answer, row.finished_at = status, reason, answer, now
            row.lease_owner, row.lease_expires = None, None
            if transcript is not None:
                row.transcript = transcript
            if usage is not None:
                row.requests, row.input_tokens, row.output_tokens = usage.requests, usage.input_tokens, usage.output_tokens
            row.report_run_id = await _queue_report(s, row, report, now)
            await s.execute(delete(CapabilityStateRow).where(CapabilityStateRow.capability == INBOX,
                                                             CapabilityStateRow.scope == run_id))
            return row

    async def drop_queued(self, run_id: str | None, why: str) -> bool:
        """A queued report turn whose news the conversation's agent already has (it waited for the run, or
        answered the question): it ends without running, its card not posted. False once it has started."""
        if not run_id:
            return False
        async with self._sessions() as s, s.begin():
            return await _drop(s, run_id, why, self._clock.now())

    async def get(self, run_id: str) -> BackgroundRun | None:
        async with self._sessions() as s:
            return await s.get(BackgroundRun, run_id)

    async def of_conversation(self, conversation_id: str, *, running: bool = False) -> list[BackgroundRun]:
        q = select(BackgroundRun).where(BackgroundRun.conversation_id == conversation_id)
        if running:
            q = q.where(BackgroundRun.status == RUNNING)
        async with self._sessions() as s:
            return list(await s.scalars(q.order_by(BackgroundRun.created_at)))

    async def children(self, parent_run_id: str) -> list[BackgroundRun]:
        """The running background runs a turn started."""
        async with self._sessions() as s:
            return list(await s.scalars(select(BackgroundRun).where(
                BackgroundRun.parent_run_id == parent_run_id, BackgroundRun.status == RUNNING)))

    async def renew(self, run_ids: list[str]) -> None:
        if not run_ids:
            return
        async with self._sessions() as s, s.begin():
            await s.execute(update(BackgroundRun).where(
                BackgroundRun.id.in_(run_ids), BackgroundRun.status == RUNNING,
                BackgroundRun.lease_owner == self._store.owner,
            ).values(lease_expires=self._clock.now() + timedelta(seconds=self._store.lease_seconds)))

    async def interrupted(self, *, at_start: bool) -> list[BackgroundRun]:
        """Running rows no process is working on: a lapsed lease (its replica died), or, at start-up on
        SQLite, every one (one process owns the file; the last one is gone)."""
        now = self._clock.now()
        lapsed = self._store.shared or not at_start

        def program(q: driver.Statements) -> driver.Program[list[BackgroundRun]]:  # every sweep asks: on the driver
            rows = yield q.all(f"SELECT {_ROWS.columns} FROM background_runs WHERE status = :running"
                               + (" AND (lease_expires <= :now OR lease_expires IS NULL)" if lapsed else ""),
                               running=RUNNING, now=now)
            return [_ROWS.of(q, row) for row in rows]

        return await driver.read(self._store.engine, program)

    async def request_stop(self, run_id: str, who: str) -> None:
        """A Stop for a run working on another replica; its owner takes it up at its next sweep."""
        async with self._sessions() as s, s.begin():
            await s.execute(update(BackgroundRun).where(BackgroundRun.id == run_id, BackgroundRun.status == RUNNING)
                            .values(stop_requested_by=who))

    async def stop_requests(self, run_ids: list[str]) -> dict[str, str]:
        if not run_ids:
            return {}
        async with self._sessions() as s:
            rows = await s.execute(select(BackgroundRun.id, BackgroundRun.stop_requested_by).where(
                BackgroundRun.id.in_(run_ids), BackgroundRun.stop_requested_by.is_not(None)))
            return {run_id: who for run_id, who in rows}


async def _queue_report(s: AsyncSession, row: BackgroundRun, text: str, now: datetime) -> str:
    """A queued run of kind `report` in the row's conversation, as the person who started the work, with
    `text` as its message: the one way a background run speaks into its conversation."""
    report_id = new_id()
    s.add(Run(id=report_id, conversation_id=row.conversation_id, binding_id=row.binding_id,
              agent_id=row.agent_id, status=QUEUED, kind=REPORT, reason="",
              requester_person_id=row.requester_person_id, requester_account=row.requester_account,
              requester_name=row.requester_name, requests=0, input_tokens=0, output_tokens=0, created_at=now))
    await s.flush()  # the run before its message (the message's run id names it)
    s.add(Message(conversation_id=row.conversation_id, run_id=report_id, role=REPORT, text=text,
                  status=QUEUED, sender_name="", created_at=now))
    return report_id


async def _drop(s: AsyncSession, run_id: str, why: str, now: datetime) -> bool:
    changed = (await s.execute(update(Run).where(Run.id == run_id, Run.status == QUEUED).values(
        status=FINISHED_RUN, reason=why, finished_at=now))).rowcount
    if changed:
        await s.execute(update(Message).where(Message.run_id == run_id).values(status="processed"))
    return bool(changed)
