"""The store's operations, one method per question the core asks.

Each method is one short transaction. The ones that must be atomic together (the inbound
ledger, the queued run and the user's message) are one method, `ingest`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from collections import OrderedDict
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Protocol, TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from gateway.clock import Clock, new_id
from gateway.messages import ChatKind, InboundMessage, conversation_key, reply_thread
from gateway.outbound.adapter import ReplyTarget
from gateway.store import driver
from gateway.store.availability import DEGRADED_AFTER, StoreUnavailable, guard
from gateway.store.capability_state import CapabilityState
from gateway.store.detached import Rows
from gateway.store.models import AdapterState, Base, Conversation, Delivery, Message, Run

log = logging.getLogger("gateway.store")

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")

# Run statuses. `queued` and `running` are live; `parked` waits for a person; the rest are ends.
QUEUED, RUNNING, PARKED = "queued", "running", "parked"
FINISHED, FAILED, STOPPED, EXPIRED = "finished", "failed", "stopped", "expired"
GUARDRAIL_BLOCKED, BUDGET_EXCEEDED = "guardrail_blocked", "budget_exceeded"
# A file share's delivery row is keyed by this and a hash, not by its run (gateway/outbound/files.py).
FILE_DELIVERY = "file-"
ENDED = frozenset({FINISHED, FAILED, STOPPED, EXPIRED, GUARDRAIL_BLOCKED, BUDGET_EXCEEDED})
# A message of a run that could not be claimed: kept in the table, never read as a turn's prompt or history again.
SET_ASIDE = "set_aside"


class Duplicate(Exception):
    """The inbound ledger already holds this event: a redelivery."""


class QueueFull(Exception):
    """The conversation already has as many queued messages as the limit allows."""


@dataclass(frozen=True, slots=True)
class ConversationRef:
    id: str
    key: str
    platform: str
    binding_id: str
    workspace: str
    channel: str
    thread: str | None
    chat_kind: str

    @classmethod
    def of(cls, message: InboundMessage, id: str = "") -> ConversationRef:
        """The conversation `message` belongs to: the one place a message becomes one."""
        return cls(id, conversation_key(message), message.platform, message.binding_id, message.workspace,
                   message.channel, reply_thread(message), message.chat_kind.value)

    def target(self) -> ReplyTarget:
        """Where this conversation's replies, cards and notices go."""
        return ReplyTarget(self.platform, self.binding_id, self.workspace, self.channel, self.thread,
                           ChatKind(self.chat_kind), self.id)


@dataclass(frozen=True, slots=True)
class Identity:
    person_id: str
    display_name: str


@dataclass(frozen=True, slots=True)
class Line:
    """One stored user or assistant message, as a run's prompt or history needs it."""

    role: str
    text: str
    sender_name: str


@dataclass(frozen=True, slots=True)
class Claimed:
    """A run just moved to running, with its conversation, its prompt and the conversation's earlier turns:
    everything `Runner.prepare` needs of the store, so the run's preparation makes no round trip of its own."""

    run: Run
    conversation: ConversationRef
    prompt: list[Line]
    history: list[Line]
    fresh: bool  # never started before: nothing of it was posted yet
    more: bool = False  # other runs of the conversation were already queued behind it
    files: bool = True  # files were shared with its messages (gateway.inbound.attachments): worth reading


@dataclass(frozen=True, slots=True)
class FinalRow:
    """A reply's posted message in its final state, written with the run's end (`Store.end_run`)."""

    seq: int
    platform_message_id: str | None
    text: str


@dataclass(frozen=True, slots=True)
class Ingested:
    conversation: ConversationRef
    message_id: int
    run_id: str
    new_run: bool
    claimed: Claimed | None = None  # `ingest(start=True)` in an idle conversation: its run, already running


# What `Store._claim` read: the run, its conversation, the conversation's live runs, its history rows,
# whether it never started, whether files came with it.
_ClaimRows = tuple[Run, ConversationRef, list[Run], list[driver.Row], bool, bool]


class Handoff(Protocol):
    """Who runs next once a run ends (`gateway.runs.queue.Scheduler`, on SQLite): the run's end then claims
    that conversation's next run in its own transaction, one COMMIT instead of two. Under a burst most runs
    wait for a slot, and each slot a run's end frees is the next waiting conversation's."""

    def next_after(self, run_id: str) -> str | None:
        """The conversation whose run to claim with `run_id`'s end, if the end frees a slot someone waits for."""

    def handed(self, conversation_id: str, claimed: Claimed | None, made: bool) -> None:
        """What that claim gave (`made`: False when the end's transaction failed and nothing was claimed)."""

    def held(self) -> list[str]:
        """The runs claimed that way whose worker has not started them yet: their leases are renewed too."""


LEASE_SECONDS = 60.0
CACHE_SIZE = 10_000
HISTORY_MESSAGES = 200  # user and assistant messages a run is reminded of, newest kept
IDENTITY_TTL = 300.0  # another replica may link an account; pick that up within minutes


class _Lru(OrderedDict[K, V]):
    """A small bounded map: the least recently used entry goes first."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def get_fresh(self, key: K) -> V | None:
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.size:
            self.popitem(last=False)


# Every table that keeps rows under a conversation, dependents first (the order foreign keys need).
CONVERSATION_TABLES = tuple(t.name for t in reversed(Base.metadata.sorted_tables) if "conversation_id" in t.c)


class Store:
    def __init__(self, engine: AsyncEngine, clock: Clock | None = None, owner: str | None = None,
                 lease_seconds: float = LEASE_SECONDS) -> None:
        self.engine = engine
        self.lease_seconds = lease_seconds
        self.clock = clock or Clock()
        self.sessions = async_sessionmaker(engine, expire_on_commit=False)
        self.owner = owner or new_id()  # this process, for run leases
        self.shared = engine.dialect.name == "postgresql"  # several replicas may share it
        # Conversations never change once created, and accounts rarely: keep what we read.
        self._conversations: _Lru[str, ConversationRef] = _Lru(CACHE_SIZE)
        self._identities: _Lru[tuple[str, str, str], tuple[Identity, str, float]] = _Lru(CACHE_SIZE)
        self.capability_state = CapabilityState(self.engine, self.sessions, self.clock)
        self.handoff: Handoff | None = None  # the scheduler's, on SQLite: a run's end claims the next run

    def _lock(self, q: driver.Statements, key: str) -> driver.Program[None]:
        """Serialize work on one conversation across replicas (a transaction-scoped advisory lock).

        SQLite needs none: one process owns the file, and its scheduler has one worker per
        conversation.
        """
        if self.shared:
            yield q.one("SELECT pg_advisory_xact_lock(hashtextextended(:k, 0))", k=key)

    async def close(self) -> None:
        await self.engine.dispose()

    async def health(self) -> dict[str, Any]:
        """For /readyz: "ok"; "degraded" with how long writes have waited (a lock held
        elsewhere); or "down" when a probe gets no answer within the bound. With what happened
        meanwhile (`Outages`): since when it has not answered, the last error, when it recovered."""
        limits = guard(self.engine)
        return {**await self._probe(), **limits.outages.state()}

    async def _probe(self) -> dict[str, Any]:
        limits = guard(self.engine)
        waits = limits.waits
        if waits.longest():
            # Something is in flight: a probe would only queue behind it. What is known decides:
            # an outage of no answer at all is "down" even with writes retrying against it (under
            # load they always are: PostgreSQL refusing connections read "degraded", ready).
            return limits.outages.down() or waits.state()
        patience = 4 * DEGRADED_AFTER
        started = time.monotonic()
        try:
            with waits.waiting():
                async with asyncio.timeout(patience):
                    async with self.engine.connect() as conn:
                        await conn.exec_driver_sql("SELECT 1")
        except (TimeoutError, StoreUnavailable) as e:
            if isinstance(e, TimeoutError) or not e.unreachable:
                waited = round(time.monotonic() - started, 2)
                return {"status": "degraded", "waiting_seconds": waited, "waiting": 1}
            limits.outages.failed(e)
            return {"status": "down", "error": str(e)[:200]}
        except Exception as e:
            limits.outages.failed(e)
            return {"status": "down", "error": f"{type(e).__name__}: {e}"[:200]}
        return {"status": "ok"}

    async def patiently(self, work: Callable[[], Awaitable[T]], what: str) -> T:
        """Work already accepted (a run's claim, its replies, its end) is not refused when the
        database is busy: it is tried again, with backoff, until it goes through."""
        delay = 0.1
        while True:
            try:
                return await work()
            except StoreUnavailable as e:
                log.warning("%s: the database is busy (%s); trying again in %.1fs", what, e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, max(self.busy_timeout, 1.0))

    @property
    def busy_timeout(self) -> float:
        return guard(self.engine).bound

    # --- inbound ------------------------------------------------------------------------

    async def record(self, binding_id: str, event_ids: Sequence[str]) -> bool:
        """Record event ids in the ledger on their own; False if any was already there.

        For events whose effect is not a stored message (a refusal, a pairing code, a chat
        command): recorded just before the effect, so it happens at most once on any replica.
        """
        try:
            await driver.transaction(self.engine, lambda q: self._ledger(q, binding_id, event_ids))
        except Duplicate:
            return False
        return True

    def _ledger(self, q: driver.Statements, binding_id: str, event_ids: Sequence[str]) -> driver.Program[None]:
        """Insert ledger rows; Duplicate (rolling the transaction back) if any was there.

        One statement for all of them (a Slack mention has two ids): a row that conflicted is one
        not added, so fewer rows added than ids is a redelivery, as a conflict of any one was."""
        if not event_ids:
            return
        added = yield q.run(_ledger_sql(len(event_ids)), b=binding_id, t=self.clock.now(),
                            **{f"e{i}": event_id for i, event_id in enumerate(event_ids)})
        if added != len(event_ids):
            raise Duplicate

    async def ingest(
        self,
        *,
        binding_id: str,
        event_ids: Sequence[str],
        conversation: ConversationRef,
        identity: Identity,
        account_id: str,
        text: str,
        agent_id: str,
        platform_message_id: str | None,
        queue_limit: int,
        files: str | None = None,
        start: bool = False,
    ) -> Ingested:
        """Ledger, conversation, queued run and the user's message, in one transaction.

        `files` (JSON, `gateway.inbound.attachments`) names the files shared with the message: kept with
        it as capability state ("attachments", "run:<run id>", message id), in the same transaction.

        `start`: the caller holds a slot to run it now (`Scheduler.reserve`). If the conversation is idle
        (no run queued, running or parked) the run is stored running, leased to this process, and
        returned as `claimed`, with the history the claim would have read: one transaction instead of
        ingest, wake and `claim_next_run`, and nothing read back that this one just wrote.

        Raises Duplicate for a redelivery and QueueFull when the conversation's queue is full
        (in which case nothing is stored, not even the ledger row, so the person can retry).
        """
        def program(q: driver.Statements) -> driver.Program[Ingested]:
            yield from self._ledger(q, binding_id, event_ids)
            # A conversation the caller already found exists: no need to read it again. A new
            # one is created under a lock on its key; an existing one's own lock is held before
            # its queue is read, as claim_next_run holds it to take the queued run. One this
            # transaction created needs none: no other replica can see its id before the commit.
            conv, created = conversation, False
            if not conversation.id:
                yield from self._lock(q, conversation.key)
                if not self.shared:
                    conv, created = yield from self._conversation_raw(q, conversation, self.clock.now())
                else:
                    # PostgreSQL: the conversation's row goes in the statement with the run's and the
                    # message's (one round trip fewer). If its key is taken (a conversation this process no
                    # longer has at hand) that statement stores nothing: the message goes into the one there.
                    ingested = yield from stored(q, self._new_conversation(conversation), True, joined=True)
                    if ingested is not None:
                        return ingested
                    conv = yield from _keyed(q, conversation.key)
            ingested = yield from stored(q, conv, created)
            assert ingested is not None  # None only where `joined`
            return ingested

        def stored(q: driver.Statements, conv: ConversationRef, created: bool,
                   joined: bool = False) -> driver.Program[Ingested | None]:
            """The message stored in `conv`; `joined`: with the conversation's own row, None if its key is taken."""
            if not created:
                yield from self._lock(q, conv.id)
            # Stamped once the conversation is ours: on PostgreSQL the lock may have waited for
            # another replica's run to end, and this run must not read as started before it ended.
            now = self.clock.now()
            # A message joins a queued run only if that run never started: one that started before
            # (interrupted by a crash, queued again) may already have shown its answer. Never a
            # report run: that one runs as the person who started the background run.
            # A conversation this transaction created has nothing queued, running or parked: not read.
            queued, run_id, live = (0, None, 0) if created else (yield q.one(
                "SELECT (SELECT count(*) FROM messages WHERE conversation_id = :c AND status = 'queued'),"
                " (SELECT id FROM runs WHERE conversation_id = :c AND status = 'queued' AND started_at IS NULL"
                " AND kind = 'turn' ORDER BY created_at LIMIT 1),"
                " (SELECT count(*) FROM runs WHERE conversation_id = :c AND status IN ('queued', 'running', 'parked'))",
                c=conv.id,
            )) or (0, None, 0)
            if (queued or 0) >= queue_limit:
                raise QueueFull
            new_run = run_id is None
            # Started here only in an idle conversation: a run queued, running (a lease perhaps lapsed)
            # or parked goes first, through the claim.
            claim = start and new_run and not live
            lease = now + timedelta(seconds=self.lease_seconds)
            run_row: dict[str, Any] | None = None
            if run_id is None:
                run_id = new_id()
                run_row = {"id": run_id, "c": conv.id, "b": binding_id, "a": agent_id, "p": identity.person_id,
                           "acc": account_id, "name": identity.display_name, "t": now,
                           "rst": RUNNING if claim else QUEUED, "s": now if claim else None,
                           "o": self.owner if claim else None, "e": lease if claim else None}
            # Each statement's parameters are its own dict, bound in place (`driver.Stmt`): built here once.
            message = {"c": conv.id, "r": run_id, "text": text, "p": identity.person_id, "acc": account_id,
                       "name": identity.display_name, "pm": platform_message_id, "t": now,
                       "mst": "processing" if claim else "queued"}
            attached = None if files is None else {"fs": f"run:{run_id}", "fv": files, "t": now}
            # What the claim would read of the conversation's earlier turns: none in a conversation this
            # transaction created; read with the message's rows on PostgreSQL; else after them.
            rows: list[driver.Row] | None = [] if created else None
            if self.shared:
                # PostgreSQL answers each statement in a round trip of its own (about 120 us of the loop's
                # CPU in the socket's send): the run, the message and its files go as one, in
                # data-modifying CTEs, which all run to completion whichever the SELECT reads. None reads
                # another's rows (each sees the database as of the statement's start): the message's id
                # reaches the files' row by RETURNING, and the run's row is checked against its
                # conversation at the statement's end, as it would be at the end of its own.
                params = {**(run_row or {}), **message, **(attached or {})}
                if joined:
                    row = yield q.one(_pg_insert_sql(True, attached is not None, conversation=True),
                                      key=conv.key, platform=conv.platform, binding_id=conv.binding_id,
                                      workspace=conv.workspace, channel=conv.channel, thread=conv.thread,
                                      chat_kind=conv.chat_kind, **params)
                    if row is None:  # the key was taken: nothing was stored
                        return None
                elif claim and rows is None:
                    got = yield q.all(_pg_insert_sql(True, attached is not None, True), n=HISTORY_MESSAGES, **params)
                    row, rows = got[0], _history_beside(got, now)
                else:
                    row = yield q.one(_pg_insert_sql(run_row is not None, attached is not None), **params)
            else:
                if run_row is not None:
                    yield driver.Stmt("run", _RUN_INSERT, run_row)
                row = yield driver.Stmt("one", _MESSAGE_INSERT, message)
                assert row is not None
                if attached is not None:
                    attached["k"] = f"{int(row[0]):012d}"
                    yield driver.Stmt("run", _FILES_ROW, attached)
            assert row is not None
            claimed = None
            if claim:
                # What the claim would read: the run as stored, this message as its prompt, and the
                # conversation's earlier turns.
                if rows is None:
                    rows = yield from _history(q, conv.id)
                run = _RUNS.new(id=run_id, conversation_id=conv.id, binding_id=binding_id, agent_id=agent_id,
                                status=RUNNING, reason="", requester_person_id=identity.person_id,
                                requester_account=account_id, requester_name=identity.display_name, requests=0,
                                input_tokens=0, output_tokens=0, state=None, created_at=now, started_at=now,
                                finished_at=None, lease_owner=self.owner, lease_expires=lease, kind="turn")
                claimed = Claimed(run, conv, [Line("user", text, identity.display_name)],
                                  [Line(r[0], r[1], r[2]) for r in reversed(rows)
                                   if r[3] != run_id and r[4] in ("processed", "final")],
                                  fresh=True, files=files is not None)
            return Ingested(conv, int(row[0]), run_id, new_run, claimed)

        ingested = await driver.transaction(self.engine, program)
        self._remember(ingested.conversation)
        return ingested

    @staticmethod
    def _new_conversation(ref: ConversationRef) -> ConversationRef:
        """`ref` with an id of its own, for its row. Built by its constructor, not `dataclasses.replace` and
        a getattr per field (8.4 -> 5.0 us, the id's own 1.5 included): a burst of new DMs is a new
        conversation a message."""
        return ref if ref.id else ConversationRef(new_id(), ref.key, ref.platform, ref.binding_id, ref.workspace,
                                                  ref.channel, ref.thread, ref.chat_kind)

    def _conversation_raw(
        self, q: driver.Statements, ref: ConversationRef, now: datetime
    ) -> driver.Program[tuple[ConversationRef, bool]]:
        """The conversation under `ref.key`, created if there is none; and whether it was created.

        Inserted first, read only when the key is taken: a conversation asked for here is new but for
        one this process no longer has at hand (`ingest` is handed the ones it knows), so most cost
        one statement, not a read that finds nothing and the insert."""
        created = self._new_conversation(ref)
        added = yield q.run(
            _CONVERSATION_INSERT,
            c=created.id, key=created.key, platform=created.platform, binding_id=created.binding_id,
            workspace=created.workspace, channel=created.channel, thread=created.thread, chat_kind=created.chat_kind,
            t=now,
        )
        if added == 1:
            return created, True
        return (yield from _keyed(q, ref.key)), False

    async def create_conversation(self, ref: ConversationRef) -> ConversationRef:
        now = self.clock.now()
        created, _ = await driver.transaction(self.engine, lambda q: self._conversation_raw(q, ref, now))
        return self._remember(created)

    async def conversation_by_key(self, key: str) -> ConversationRef | None:
        cached = self._conversations.get_fresh(key)
        if cached is not None:
            return cached
        return await self._conversation_where("key", key)

    def known_conversation(self, key: str) -> ConversationRef | None:
        """The conversation under `key` if this process has it at hand (no store round trip);
        None says nothing about the store (`ingest` finds or creates it in its own transaction)."""
        return self._conversations.get_fresh(key)

    async def conversation(self, conversation_id: str) -> ConversationRef | None:
        cached = self._conversations.get_fresh(conversation_id)
        if cached is not None:
            return cached
        return await self._conversation_where("id", conversation_id)

    async def _conversation_where(self, column: str, value: str) -> ConversationRef | None:
        """A conversation not in the cache: every message of a new conversation looks for it
        first, so this is one driver round trip rather than an ORM session's five."""

        def program(q: driver.Statements) -> driver.Program[ConversationRef | None]:
            row = yield q.one(f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE {column} = :v", v=value)
            return ConversationRef(*row) if row is not None else None

        ref = await driver.transaction(self.engine, program)
        return self._remember(ref) if ref is not None else None

    async def retire_conversation(self, conv: ConversationRef) -> None:
        """Free the conversation's key (`/new`): the next message there starts a new conversation.

        The old one keeps its id, messages and runs under a key no message maps to. Another
        replica may still hold the old key in its cache until it is evicted.
        """
        async with self.sessions() as s, s.begin():
            await s.execute(update(Conversation).where(Conversation.id == conv.id)
                            .values(key=f"{conv.key}#{conv.id}", updated_at=self.clock.now()))
        self._conversations.pop(conv.key, None)
        self._conversations.pop(conv.id, None)

    async def rename_conversation(self, conversation_id: str, title: str | None) -> None:
        """The person's own title for it (None: back to its first message)."""
        async with self.sessions() as s, s.begin():
            await s.execute(update(Conversation).where(Conversation.id == conversation_id).values(title=title))

    async def delete_conversation(self, conv: ConversationRef) -> bool:
        """Erase a conversation and everything kept under it, in one transaction; False (nothing
        erased) while a run of it is queued, running or parked: stop it first.

        Gone: every row of a table with a `conversation_id` (messages, runs, background runs,
        approval cards and decisions, modes and their changes, stream events, scheduled tasks: a
        table added later is covered by being so named), and what hangs off its runs and tasks:
        deliveries, schedule occurrences, and the capability state kept under the conversation or
        its runs (attachment references, plans, snapshots, spills), and an adapter's state kept under
        it (the web chat's files). Kept: the inbound ledger (a
        redelivery must still be dropped) and notes, which belong to the person or the chat and
        name no conversation.
        """
        def program(q: driver.Statements) -> driver.Program[bool]:
            busy = yield q.one("SELECT 1 FROM runs WHERE conversation_id = :c AND status IN ('queued', 'running',"
                               " 'parked') LIMIT 1", c=conv.id)
            if busy is not None:
                return False
            runs = ("SELECT id FROM runs WHERE conversation_id = :c UNION SELECT id FROM background_runs"
                    " WHERE conversation_id = :c")
            yield q.run(f"DELETE FROM capability_state WHERE scope = :c OR scope IN ({runs})"
                        " OR scope IN (SELECT 'run:' || id FROM runs WHERE conversation_id = :c)", c=conv.id)
            yield q.run(f"DELETE FROM deliveries WHERE run_id IN ({runs})", c=conv.id)
            # An adapter's state kept under the conversation is keyed `<what>:<conversation id>[:…]`
            # (the web chat's files). Ids are hex: nothing in them is a LIKE wildcard.
            yield q.run("DELETE FROM adapter_state WHERE binding_id = :b AND (key LIKE :k OR key LIKE :under)",
                        b=conv.binding_id, k=f"%:{conv.id}", under=f"%:{conv.id}:%")
            yield q.run("DELETE FROM schedule_occurrences WHERE task_id IN"
                        " (SELECT id FROM scheduled_tasks WHERE conversation_id = :c)", c=conv.id)
            for table in CONVERSATION_TABLES:
                yield q.run(f"DELETE FROM {table} WHERE conversation_id = :c", c=conv.id)
            yield q.run("DELETE FROM conversations WHERE id = :c", c=conv.id)
            return True

        erased = await driver.transaction(self.engine, program)
        if erased:
            self._conversations.pop(conv.key, None)
            self._conversations.pop(conv.id, None)
        return erased

    def _remember(self, ref: ConversationRef) -> ConversationRef:
        self._conversations.put(ref.key, ref)
        self._conversations.put(ref.id, ref)
        return ref

    async def messages(self, conversation_id: str) -> list[Message]:
        async with self.sessions() as s:
            rows = await s.scalars(
                select(Message)
                .where(Message.conversation_id == conversation_id)
                .order_by(Message.created_at, Message.id)
            )
            return list(rows)

    async def add_message(
        self, conversation_id: str, role: str, text: str, *, run_id: str | None = None, status: str = "final",
        person_id: str | None = None, account_id: str | None = None,
    ) -> int:
        async with self.sessions() as s, s.begin():
            msg = Message(
                conversation_id=conversation_id,
                run_id=run_id,
                role=role,
                text=text,
                status=status,
                person_id=person_id,
                account_id=account_id,
                sender_name="",
                created_at=self.clock.now(),
            )
            s.add(msg)
            await s.flush()
            return msg.id

    async def keep_transcript(self, message_id: int, line: str) -> None:
        """A voice message's transcript becomes its stored text, ahead of the note naming its files, so
        later turns (and conversation search) read what was said. Once: a resumed run's second try is a no-op."""
        async with self.sessions() as s, s.begin():
            msg = await s.get(Message, message_id)
            if msg is not None and line not in msg.text:
                msg.text = f"{line}\n\n{msg.text}".strip()

    async def conversations_with_queued_runs(self) -> list[str]:
        """Read on the driver: every sweep asks (`gateway.store.detached` says why)."""
        def program(q: driver.Statements) -> driver.Program[list[str]]:
            rows = yield q.all("SELECT DISTINCT conversation_id FROM runs WHERE status = 'queued'")
            return [r[0] for r in rows]

        return await driver.read(self.engine, program)

    # --- identity -----------------------------------------------------------------------

    async def identify(self, platform: str, workspace: str, account_id: str, display_name: str) -> Identity:
        """The person behind a platform account; created on first contact."""
        key = (platform, workspace, account_id)
        cached = self._identities.get_fresh(key)
        if cached is not None and cached[1] == display_name and self.clock.monotonic() < cached[2]:
            return cached[0]
        identity = await self._identify(platform, workspace, account_id, display_name)
        self._identities.put(key, (identity, display_name, self.clock.monotonic() + IDENTITY_TTL))
        return identity

    async def _identify(self, platform: str, workspace: str, account_id: str, display_name: str) -> Identity:
        """One driver transaction (a first contact used to cost an ORM session's dozen round trips,
        and a burst of new people is a burst of first contacts)."""
        now = self.clock.now()
        where = " WHERE a.platform = :pl AND a.workspace = :w AND a.account_id = :acc"
        known = ("SELECT a.person_id, a.display_name, p.display_name FROM accounts a"
                 " JOIN people p ON p.id = a.person_id" + where)

        def program(q: driver.Statements) -> driver.Program[Identity]:
            row = yield q.one(known, pl=platform, w=workspace, acc=account_id)
            if row is None:
                person_id, name = new_id(), display_name or account_id
                yield q.run("INSERT INTO people (id, display_name, created_at) VALUES (:id, :n, :t)",
                            id=person_id, n=name, t=now)
                added = yield q.run(
                    "INSERT INTO accounts (platform, workspace, account_id, display_name, person_id, created_at)"
                    " VALUES (:pl, :w, :acc, :n, :p, :t) ON CONFLICT (platform, workspace, account_id) DO NOTHING",
                    pl=platform, w=workspace, acc=account_id, n=display_name, p=person_id, t=now)
                if added == 1:
                    return Identity(person_id, name)
                # A concurrent first contact (another replica) added the account: theirs stands.
                yield q.run("DELETE FROM people WHERE id = :id", id=person_id)
                row = yield q.one(known, pl=platform, w=workspace, acc=account_id)
                if row is None:  # pragma: no cover - the account that conflicted was deleted meanwhile
                    raise RuntimeError("could not resolve account")
            person_id, account_name, person_name = row
            if display_name and account_name != display_name:
                yield q.run("UPDATE accounts SET display_name = :n WHERE platform = :pl AND workspace = :w"
                            " AND account_id = :acc", n=display_name, pl=platform, w=workspace, acc=account_id)
            return Identity(person_id, display_name or person_name)

        return await driver.transaction(self.engine, program)

    def forget_identity(self, platform: str, workspace: str, account_id: str) -> None:
        """Drop a cached identity (an account was linked or unlinked here; other replicas see it within IDENTITY_TTL)."""
        self._identities.pop((platform, workspace, account_id), None)

    # --- runs ---------------------------------------------------------------------------

    async def claim_next_run(self, conversation_id: str) -> Claimed | None:
        """Move the oldest queued run of a conversation to running, with what the turn needs
        (its conversation, its prompt and the conversation's history), in one transaction; None when
        nothing waits. The conversation comes from this process's cache where it has it (most claims: its
        message was ingested here), else from one more statement of the same transaction."""
        known = self._conversations.get_fresh(conversation_id)
        # The message was accepted: a busy database delays its run, never drops it.
        claimed = await self.patiently(
            lambda: driver.transaction(self.engine, lambda q: self._claim(q, conversation_id, known)), "claiming a run")
        return self._claimed(claimed, known)

    def _claim(self, q: driver.Statements, conversation_id: str,
               known: ConversationRef | None) -> driver.Program[_ClaimRows | None]:
        """`claim_next_run`'s statements: a program of its own, or the tail of a run's end (`end_run`)."""
        yield from self._lock(q, conversation_id)
        now = self.clock.now()  # once the conversation is ours (see `ingest`)
        runs, files, run = yield from _next_run(q, conversation_id, now)
        if run is None:
            return None
        conversation = known
        if conversation is None:  # never None in the store: its runs hold its id as a foreign key
            row = yield q.one(f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE id = :v", v=conversation_id)
            if row is None:
                return None
            conversation = ConversationRef(*row)
        fresh = run.started_at is None
        started = run.started_at or now
        changed = yield q.run(
            "UPDATE runs SET status = 'running', started_at = :s, lease_owner = :o, lease_expires = :e"
            " WHERE id = :id AND status = :old",
            s=started, o=self.owner, e=now + timedelta(seconds=self.lease_seconds), id=run.id, old=run.status,
        )
        if changed != 1:
            return None
        run.status, run.started_at = RUNNING, started
        # Messages that joined this run stop counting against the queue once it starts.
        yield q.run(
            "UPDATE messages SET status = 'processing' WHERE run_id = :r AND status = 'queued'", r=run.id
        )
        rows = yield from _history(q, conversation_id)
        return run, conversation, runs, rows, fresh, files[run.id]

    def _claimed(self, claimed: _ClaimRows | None, known: ConversationRef | None) -> Claimed | None:
        """What `_claim` read, as the run's turn needs it."""
        if claimed is None:
            return None
        run, conversation, runs, rows, fresh, files = claimed
        if known is None:
            self._remember(conversation)
        rows.reverse()
        run_id = run.id
        prompt = [Line(r[0], r[1], r[2]) for r in rows if r[3] == run_id and r[0] in ("user", "report", "scheduled")]
        history = [Line(r[0], r[1], r[2]) for r in rows if r[3] != run_id and r[4] in ("processed", "final")]
        more = any(r.status == QUEUED and r.id != run_id for r in runs)
        return Claimed(run, conversation, prompt, history, fresh, more, files)

    async def queued_senders(self, run_id: str) -> list[tuple[str | None, str | None]]:
        """(account, person) of each one who asked what a queued run holds: a message joins the run waiting in its
        conversation whoever sent it (`ingest`), so a stop is asked of each (`Stops.stop`)."""
        def program(q: driver.Statements) -> driver.Program[list[driver.Row]]:
            return (yield q.all(_ASKED, r=run_id, old=QUEUED))

        return list(dict.fromkeys((r[1], r[2]) for r in await driver.transaction(self.engine, program, write=False)))

    async def stop_queued(self, run_id: str, conversation_id: str, reason: str,
                          senders: Collection[tuple[str | None, str | None]], line: str = "",
                          notice: bool = False) -> str | None:
        """A person stopped a run still waiting in its queue: what `senders` (account, person) asked in it ends
        `stopped` before it starts, kept as history (asked, not answered). The messages of anyone else who joined
        it stay queued, in its place, as theirs (the run's requester is then the first of them): the stopped
        ones move to a run of their own. Under the conversation's lock, the one an ingest holds to join a message
        to a queued run: no message joins it once it is stopped. Returns the stopped run's id; None when it was
        no longer queued (claimed meanwhile: it is stopped as a running one) or held nothing of `senders`.
        `line`: the stopped line to post, kept in the same transaction (capability state `stop`/`lines`, keyed by
        the stopped run's id) until it is posted (`Stops.post_lines`): a crash before the post loses no line.
        `notice`: the line goes in the thread, so it is kept in the conversation's messages here, once, however
        many times its post is tried again."""
        now = self.clock.now()

        def program(q: driver.Statements) -> driver.Program[str | None]:
            yield from self._lock(q, conversation_id)
            run = yield q.one("SELECT binding_id, agent_id, created_at FROM runs WHERE id = :id AND status = :old",
                              id=run_id, old=QUEUED)
            if run is None:
                return None
            asked = yield q.all(_ASKED, r=run_id, old=QUEUED)
            stopped = [m for m in asked if (m[1], m[2]) in senders]
            kept = [m for m in asked if (m[1], m[2]) not in senders]
            if not stopped:
                return None
            stopped_id = run_id
            if kept:  # the stopped messages go to a run of their own; the rest wait, as the first one's
                stopped_id, first, ids = new_id(), stopped[0], [m[0] for m in stopped]
                yield q.run(_RUN_INSERT, id=stopped_id, c=conversation_id, b=run[0], a=run[1], rst=QUEUED,
                            p=first[2], acc=first[1], name=first[3], t=run[2], s=None, o=None, e=None)
                listed = {f"m{i}": m for i, m in enumerate(ids)}
                marks = ", ".join(f":{k}" for k in listed)
                yield q.run(f"UPDATE messages SET run_id = :new WHERE id IN ({marks})", new=stopped_id, **listed)
                keys = {f"m{i}": f"{m:012d}" for i, m in enumerate(ids)}  # their files (`_FILES_ROW`) go with them
                yield q.run("UPDATE capability_state SET scope = :new WHERE capability = 'attachments'"
                            f" AND scope = :old AND key IN ({marks})", new=f"run:{stopped_id}", old=f"run:{run_id}",
                            **keys)
                yield q.run("UPDATE runs SET requester_person_id = :p, requester_account = :acc,"
                            " requester_name = :name WHERE id = :id", p=kept[0][2], acc=kept[0][1], name=kept[0][3],
                            id=run_id)
            yield q.run("UPDATE runs SET status = :st, reason = :reason, state = NULL, finished_at = :f"
                        " WHERE id = :id", st=STOPPED, reason=reason, f=now, id=stopped_id)
            yield q.run(_PROCESSED, r=stopped_id)
            if line:
                yield q.run(_STATE_INSERT + " VALUES ('stop', 'lines', :k, :v, :t)", k=stopped_id, v=line, t=now)
                if notice:  # as `Approvals.notice` keeps a line (`add_message`)
                    yield q.run(_NOTICE_INSERT, c=conversation_id, v=line, t=now)
            return stopped_id

        return await self.patiently(lambda: driver.transaction(self.engine, program), f"stopping queued run {run_id}")

    async def fail_unclaimable(self, conversation_id: str, reason: str) -> str | None:
        """The run a claim of `conversation_id` would take, when that claim raises every time (a row sqlite3
        cannot read, a constraint): it ends `failed` and its messages are set aside (`SET_ASIDE`), never read
        as a prompt or history again, so the conversation's later runs can be claimed. Reads no message.
        Returns its id (None: nothing was waiting after all)."""
        def program(q: driver.Statements) -> driver.Program[str | None]:
            yield from self._lock(q, conversation_id)
            _, _, run = yield from _next_run(q, conversation_id, self.clock.now())
            if run is None:
                return None
            changed = yield q.run("UPDATE runs SET status = :st, reason = :reason, finished_at = :f"
                                  " WHERE id = :id AND status = :old", st=FAILED, reason=reason, f=self.clock.now(),
                                  id=run.id, old=run.status)
            if not changed:
                return None
            yield q.run("UPDATE messages SET status = :aside WHERE run_id = :r AND status IN ('queued', 'processing')",
                        aside=SET_ASIDE, r=run.id)
            return run.id

        return await self.patiently(lambda: driver.transaction(self.engine, program),
                                    f"failing the next run of conversation {conversation_id}")

    async def run(self, run_id: str) -> Run | None:
        async with self.sessions() as s:
            return await s.get(Run, run_id)

    async def end_run(
        self,
        run_id: str,
        status: str,
        *,
        reason: str = "",
        usage: tuple[int, int, int] | None = None,
        state: str | None = None,
        reply: str | None = None,
        deliveries: Sequence[FinalRow] = (),
    ) -> None:
        """Record a run's outcome, its reply text and usage; the user's messages become history.

        `deliveries`: the reply's final delivery rows, written in the same transaction (one
        round trip fewer per reply than `save_delivery` before it; the same order)."""
        now = self.clock.now()
        # Recorded already (a try whose commit reached the database but whose answer was lost with
        # its connection: `patiently` tries again): its row is left alone and its reply not added twice.
        fresh = status in ENDED or status == PARKED
        # Copied into each try's statements (`patiently` may run the program again; binding changes them).
        answer = (_reply_sql(status == PARKED, fresh),
                  {"text": reply, "mst": "final" if status in (FINISHED, PARKED) else status, "t": now, "id": run_id,
                   "st": status}) if reply else None
        outcome: dict[str, Any] = {"st": status, "reason": reason, "state": state,
                                   "f": None if status == PARKED else now, "id": run_id}
        if usage is not None:
            outcome["n"], outcome["i"], outcome["o"] = usage
        ending = _end_sql(usage is not None, fresh)
        # SQLite: the next waiting conversation's claim goes in this transaction (`Handoff`). PostgreSQL keeps
        # its one-statement end: a claim there takes the conversation's advisory lock, and a retry after a lost
        # answer would find the claim it made and not know it was its own.
        handoff = None if self.shared else self.handoff
        after = handoff.next_after(run_id) if handoff is not None else None
        known = self._conversations.get_fresh(after) if after is not None else None
        # The claim rides on the end and must never fail it: where it raises (a row of that conversation that
        # cannot be read, a constraint), the transaction is rolled back and the end recorded again on its own;
        # the waiting worker then claims for itself, the ordinary way. `claiming`: the failure was the claim's.
        claim_for, claiming = after, False

        def program(q: driver.Statements) -> driver.Program[_ClaimRows | None]:
            nonlocal claiming
            claiming = False
            for d in deliveries:  # idempotent: a try whose commit was lost updates what it wrote
                yield from _save_delivery(q, run_id, d.seq, d.platform_message_id, d.text, True, now)
            if answer is not None:
                yield q.run(answer[0], **answer[1])
            changed = yield q.run(ending, **outcome)
            # Not changed: no such run, or recorded already (then the reply above was not added either).
            if changed:
                yield q.run(_PROCESSED, r=run_id)
            if claim_for is None:
                return None
            claiming = True
            claimed = yield from self._claim(q, claim_for, known)
            claiming = False  # a failed COMMIT is the end's own
            return claimed

        def one_statement(q: driver.Statements) -> driver.Program[_ClaimRows | None]:
            rows = {f"{name}{j}": value for j, d in enumerate(deliveries)
                    for name, value in (("seq", d.seq), ("pm", d.platform_message_id), ("text", d.text), ("final", True))}
            yield q.one(_pg_end_sql(len(deliveries), answer[0] if answer else None, ending),
                        **{**rows, **(answer[1] if answer else {}), **outcome, "r": run_id, "t": now})

        # PostgreSQL: the same writes in one statement, one round trip instead of one each (`_pg_end_sql`).
        # Not when two rows share a seq: one statement may not write a row twice, and the second's
        # update of the first is what the statements one by one would leave.
        chosen = one_statement if self.shared and len({d.seq for d in deliveries}) == len(deliveries) else program

        async def record() -> _ClaimRows | None:
            return await self.patiently(lambda: driver.transaction(self.engine, chosen),
                                        f"recording run {run_id} {status}")

        try:
            try:
                claimed = await record()
            except Exception as e:
                if not claiming:
                    raise
                # The error's type only: its text may quote the row it could not read.
                log.warning("run %s's end could not claim the next run of conversation %s (%s); recorded without it",
                            run_id, after, type(e).__name__)
                claim_for = None
                claimed = await record()
        except BaseException:
            if handoff is not None and after is not None:
                handoff.handed(after, None, made=False)
            raise
        if handoff is not None and after is not None:
            handoff.handed(after, self._claimed(claimed, known), made=claim_for is not None)

    async def runs_in(self, statuses: Sequence[str], conversation_id: str | None = None) -> list[Run]:
        query = select(Run).where(Run.status.in_(statuses)).order_by(Run.created_at)
        if conversation_id is not None:
            query = query.where(Run.conversation_id == conversation_id)
        async with self.sessions() as s:
            return list(await s.scalars(query))

    async def requeue_interrupted(self, *, at_start: bool = False) -> list[str]:
        """Runs left `running` by a process that died go back to the queue; returns their conversations.

        Only lapsed leases count, except at start-up on SQLite: one process owns the file, so
        every run still marked running was interrupted by the last stop.
        """
        now = self.clock.now()
        lapsed = self.shared or not at_start
        # Asked at every sweep, and mostly there are none: read first on the driver, written only if any.
        def program(q: driver.Statements) -> driver.Program[bool]:
            row = yield q.one("SELECT 1 FROM runs WHERE status = 'running'"
                              + (" AND (lease_expires <= :now OR lease_expires IS NULL)" if lapsed else "")
                              + " LIMIT 1", now=now)
            return row is not None

        if not await driver.read(self.engine, program):
            return []
        async with self.sessions() as s, s.begin():
            q = select(Run).where(Run.status == RUNNING)
            if lapsed:
                q = q.where(or_(Run.lease_expires <= now, Run.lease_expires.is_(None)))
            runs = list(await s.scalars(q))
            for run in runs:
                run.status = QUEUED
                await s.execute(
                    update(Message).where(Message.run_id == run.id, Message.status == "processing").values(status=QUEUED)
                )
            return sorted({r.conversation_id for r in runs})

    async def release_run(self, run_id: str) -> None:
        """A run this process holds goes back to its queue (the database failed it mid-way): the
        same as a lapsed lease, without waiting for one."""
        async with self.sessions() as s, s.begin():
            moved = await s.execute(update(Run).where(Run.id == run_id, Run.status == RUNNING, Run.lease_owner == self.owner)
                                    .values(status=QUEUED))
            if moved.rowcount:
                await s.execute(update(Message).where(Message.run_id == run_id, Message.status == "processing")
                                .values(status=QUEUED))

    async def renew_leases(self, run_ids: Sequence[str]) -> None:
        """Keep the leases of `run_ids` (the runs in flight here) and of the claims a run's end made for a
        worker still waiting for its slot (`Handoff.held`): a lapsed one would be requeued as a dead process's
        while it is run."""
        if self.handoff is not None:
            run_ids = [*run_ids, *self.handoff.held()]
        if not run_ids:
            return
        async with self.sessions() as s, s.begin():
            await s.execute(
                update(Run)
                .where(Run.id.in_(run_ids), Run.status == RUNNING, Run.lease_owner == self.owner)
                .values(lease_expires=self.clock.now() + timedelta(seconds=self.lease_seconds))
            )

    # --- deliveries ---------------------------------------------------------------------

    async def save_delivery(self, run_id: str, seq: int, platform_message_id: str | None, text: str, final: bool) -> None:
        """Record one posted message of a reply (a new row, or its row updated)."""
        now = self.clock.now()

        def program(q: driver.Statements) -> driver.Program[None]:
            yield from _save_delivery(q, run_id, seq, platform_message_id, text, final, now)

        await self.patiently(lambda: driver.transaction(self.engine, program), f"recording a reply of run {run_id}")

    async def deliveries(self, run_id: str) -> list[Delivery]:
        async with self.sessions() as s:
            return list(await s.scalars(select(Delivery).where(Delivery.run_id == run_id).order_by(Delivery.seq)))

    # --- adapter state ------------------------------------------------------------------

    async def get_state(self, binding_id: str, key: str) -> str | None:
        async with self.sessions() as s:  # a read: never behind another process's write lock (WAL)
            row = await s.get(AdapterState, (binding_id, key))
            return row.value if row else None

    async def set_state(self, binding_id: str, key: str, value: str) -> None:
        """A driver transaction, not an ORM session: Telegram saves its offset after every poll, and
        on SQLite a session holds the one connection across its round trips, sending the messages'
        transactions of that moment to the thread's queue behind it."""

        def program(q: driver.Statements) -> driver.Program[None]:
            yield q.run("INSERT INTO adapter_state (binding_id, key, value) VALUES (:b, :k, :v)"
                        " ON CONFLICT (binding_id, key) DO UPDATE SET value = excluded.value", b=binding_id, k=key, v=value)

        await driver.transaction(self.engine, program)


@cache
def _ledger_sql(ids: int) -> str:
    """The ledger's insert of `ids` event ids, built once per count (one or two, in practice)."""
    rows = ", ".join(f"(:b, :e{i}, :t)" for i in range(ids))
    return f"INSERT INTO inbound_ledger (binding_id, event_id, received_at) VALUES {rows} ON CONFLICT DO NOTHING"


# A new run, a user's message and the files shared with it (`ingest`): statements of their own on SQLite,
# one on PostgreSQL (`_pg_insert_sql`).
_RUN_INTO = ("INSERT INTO runs (id, conversation_id, binding_id, agent_id, status, reason,"
             " requester_person_id, requester_account, requester_name, requests, input_tokens,"
             " output_tokens, created_at, started_at, lease_owner, lease_expires)")
_RUN_VALUES = ":id, :c, :b, :a, :rst, '', :p, :acc, :name, 0, 0, 0, :t, :s, :o, :e"
_RUN_INSERT = f"{_RUN_INTO} VALUES ({_RUN_VALUES})"
_MESSAGE_INTO = ("INSERT INTO messages (conversation_id, run_id, role, text, status, person_id, account_id,"
                 " sender_name, platform_message_id, created_at)")
_MESSAGE_VALUES = ":c, :r, 'user', :text, :mst, :p, :acc, :name, :pm, :t"
_MESSAGE_INSERT = f"{_MESSAGE_INTO} VALUES ({_MESSAGE_VALUES}) RETURNING id"
# A line of the gateway's own in the thread, kept as `add_message(..., "notice", text)` keeps one.
_NOTICE_INSERT = f"{_MESSAGE_INTO} VALUES (:c, NULL, 'notice', :v, 'final', NULL, NULL, '', NULL, :t)"
_STATE_INSERT = "INSERT INTO capability_state (capability, scope, key, value, updated_at)"
_FILES_ROW = _STATE_INSERT + " VALUES ('attachments', :fs, :k, :fv, :t)"


@cache
def _pg_insert_sql(run: bool, files: bool, history: bool = False, conversation: bool = False) -> str:
    """`ingest`'s writes as one PostgreSQL statement returning the message's id: the run's insert when the
    run is new, the message's, and the files' row keyed by the message's id as `ingest` keys it on SQLite
    (zero-padded to 12 digits; lpad would cut a longer one, but the id is an integer: 10 digits at most).
    `history`: each row also one of the conversation's earlier turns (`_history_beside`). `conversation`:
    the conversation's row first, the others only if it was added (their rows from it: none, and no row
    returned, when its key is taken)."""
    if not run and not files and not history:
        return _MESSAGE_INSERT
    if conversation:
        parts = ["cv AS (" + _CONVERSATION_INSERT + " RETURNING id)",
                 f"r AS ({_RUN_INTO} SELECT {_RUN_VALUES} FROM cv)",
                 f"m AS ({_MESSAGE_INTO} SELECT {_MESSAGE_VALUES} FROM cv RETURNING id)"]
    else:
        parts = ["r AS (" + _RUN_INSERT + ")"] if run else []
        parts.append("m AS (" + _MESSAGE_INSERT + ")")
    if files:
        parts.append("f AS (" + _STATE_INSERT + " SELECT 'attachments', :fs,"
                     " lpad(id::text, 12, '0'), :fv, :t FROM m)")
    if not history:
        return "WITH " + ", ".join(parts) + " SELECT id FROM m"
    return ("WITH " + ", ".join(parts) + " SELECT m.id, h.* FROM m LEFT JOIN (SELECT " + _HISTORY_COLUMNS
            + ", created_at, id" + _HISTORY_ROWS + ") h ON true ORDER BY h.created_at DESC, h.id DESC")


def _history_beside(got: list[driver.Row], now: datetime) -> list[driver.Row]:
    """`_history`'s rows from the statement that stored the message (`_pg_insert_sql(history=True)`): (the
    message's id, a turn's columns, its created_at and id), newest first, or one row of NULLs for none. That
    statement's read does not see the message it stores; `_history`, read after, sees it take one of the
    places, so the oldest turn is left out when the message sorts before it, as it would have been."""
    rows = [r[1:6] for r in got if r[1] is not None]
    last = got[-1]
    if len(rows) == HISTORY_MESSAGES and (last[6], last[7]) < (now, got[0][0]):
        rows.pop()
    return rows


def _keyed(q: driver.Statements, key: str) -> driver.Program[ConversationRef]:
    """The conversation under `key`, whose insert found the key taken."""
    row = yield q.one(f"SELECT {_CONVERSATION_COLUMNS} FROM conversations WHERE key = :k", k=key)
    if row is None:  # pragma: no cover - the key conflicted in this very transaction
        raise RuntimeError(f"conversation {key} could not be stored")
    return ConversationRef(*row)


def _next_run(q: driver.Statements, conversation_id: str,
              now: datetime) -> driver.Program[tuple[list[Run], dict[str, bool], Run | None]]:
    """The conversation's live runs, whether files came with each one's messages, and the run a claim takes
    next (None while the conversation is held, or nothing waits). Reads no message: `Store.fail_unclaimable`
    asks it of a conversation whose messages cannot be read."""
    # Each live run with whether files came with its messages (gateway.inbound.attachments), in the same
    # statement: most runs have none, and then the run need not look them up (a statement fewer a claim).
    live = yield q.all(
        f"SELECT {_RUN_COLUMNS}, (SELECT count(*) FROM capability_state WHERE capability = 'attachments'"
        " AND scope = 'run:' || runs.id) FROM runs WHERE conversation_id = :c"
        " AND status IN ('queued', 'running', 'parked') ORDER BY created_at, id",
        c=conversation_id,
    )
    runs = [_RUNS.of(q, row) for row in live]
    files = {run.id: bool(row[-1]) for run, row in zip(runs, live)}
    # A parked run holds the conversation too: its answer comes before the next turn's.
    # A running run holds it while its replica keeps the lease; a lapsed lease means
    # that replica died, and its run goes back to the queue ahead of newer ones.
    for r in runs:
        if r.status == PARKED or (r.status == RUNNING and r.lease_expires and r.lease_expires > now):
            return runs, files, None
    return runs, files, next((r for r in runs if r.status in (QUEUED, RUNNING)), None)


def _history(q: driver.Statements, conversation_id: str) -> driver.Program[list[driver.Row]]:
    """A conversation's messages a run is reminded of, newest first: (role, text, sender_name, run_id, status).
    The newest turns only: a long conversation must not grow every request without bound."""
    rows: list[driver.Row] = yield q.all(_HISTORY, c=conversation_id, n=HISTORY_MESSAGES)
    return rows


_HISTORY_COLUMNS = "role, text, sender_name, run_id, status"
# Not a message set aside with a run that could not be claimed (`Store.fail_unclaimable`): it may be what failed.
_HISTORY_ROWS = (" FROM messages WHERE conversation_id = :c AND role IN ('user', 'assistant', 'report', 'scheduled')"
                 f" AND status != '{SET_ASIDE}' ORDER BY created_at DESC, id DESC LIMIT :n")
_HISTORY = "SELECT " + _HISTORY_COLUMNS + _HISTORY_ROWS


def _save_delivery(q: driver.Statements, run_id: str, seq: int, platform_message_id: str | None, text: str,
                   final: bool, now: datetime) -> driver.Program[None]:
    """One delivery row, written or updated, in one statement: a step of a transaction (`save_delivery`,
    `end_run`)."""
    yield q.run(_delivery_sql(), r=run_id, seq=seq, pm=platform_message_id, text=text, final=final, t=now)


@cache
def _delivery_sql(n: str = "") -> str:
    """A delivery row's upsert, its own values named with suffix `n` (several in one statement, `_pg_end_sql`).
    An update keeps the posted message's id when this call has none (an edit names none); a retried try
    whose commit was lost updates what it wrote."""
    return ("INSERT INTO deliveries (run_id, seq, platform_message_id, text, final, updated_at)"
            f" VALUES (:r, :seq{n}, :pm{n}, :text{n}, :final{n}, :t) ON CONFLICT (run_id, seq) DO UPDATE"
            " SET text = excluded.text, final = excluded.final, updated_at = excluded.updated_at,"
            " platform_message_id = COALESCE(NULLIF(excluded.platform_message_id, ''), deliveries.platform_message_id)")


@cache
def _reply_sql(parked: bool, fresh: bool) -> str:
    """`end_run`'s reply, read off the run's row as it stands (its conversation, when it started, whether it
    was parked before), so nothing of it is read back on its own. Dated from when the answer began
    streaming, so it sorts right after the turn it answers even if more messages arrived meanwhile; the
    part after an approval card began when the run resumed."""
    dated = "COALESCE(started_at, :t)" if parked else "CASE WHEN state IS NOT NULL THEN :t ELSE COALESCE(started_at, :t) END"
    return ("INSERT INTO messages (conversation_id, run_id, role, text, status, sender_name, created_at)"
            f" SELECT conversation_id, id, 'assistant', :text, :mst, '', {dated} FROM runs WHERE id = :id"
            + (" AND status != :st" if fresh else ""))


@cache
def _end_sql(counts: bool, fresh: bool) -> str:
    """`end_run`'s update of the run's row; `fresh`: only if not recorded already (see `end_run`)."""
    return ("UPDATE runs SET status = :st, reason = :reason, state = :state, finished_at = :f"
            + (", requests = :n, input_tokens = :i, output_tokens = :o" if counts else "")
            + " WHERE id = :id" + (" AND status != :st" if fresh else ""))


# The run's messages of people become history once it ended.
# A queued run's messages with who asked each (id, account, person, name): a message of no one (a scheduled
# occurrence's, a background run's report) is its run's requester's (`Store.stop_queued`).
_NO_ONE = "m.account_id IS NULL AND m.person_id IS NULL"
_ASKED = (f"SELECT m.id, CASE WHEN {_NO_ONE} THEN r.requester_account ELSE m.account_id END,"
          f" CASE WHEN {_NO_ONE} THEN r.requester_person_id ELSE m.person_id END,"
          f" CASE WHEN {_NO_ONE} THEN r.requester_name ELSE m.sender_name END"
          " FROM messages m JOIN runs r ON r.id = m.run_id WHERE m.run_id = :r AND m.status = :old"
          " ORDER BY m.created_at, m.id")
_PROCESSED = ("UPDATE messages SET status = 'processed'"
              " WHERE run_id = :r AND role IN ('user', 'report', 'scheduled') AND status IN ('queued', 'processing')")


@cache
def _pg_end_sql(deliveries: int, reply: str | None, ending: str) -> str:
    """`end_run`'s writes as one PostgreSQL statement, in data-modifying CTEs (each runs to completion, each
    sees the database as of the statement's start): the delivery rows; the run's row; the reply, read off
    the run's row as it stood before this end, as when it went first on its own; and its messages made
    history. The reply and the messages only if the run's row changed: the statement's snapshot may
    predate a try still committing (`patiently`'s retry after a lost answer) whose lock on the row `u`
    waits for, then finds the end recorded; read off the snapshot alone, the reply went in twice."""
    parts = [f"d{j} AS ({_delivery_sql(str(j))})" for j in range(deliveries)]
    parts.append(f"u AS ({ending} RETURNING 1)")
    if reply is not None:
        parts.append(f"a AS ({reply} AND EXISTS (SELECT FROM u))")
    parts.append(f"p AS ({_PROCESSED} AND EXISTS (SELECT FROM u))")
    return "WITH " + ", ".join(parts) + " SELECT count(*) FROM u"


# Read by name, not `dataclasses.asdict`, which deep-copies every field (a new conversation's two
# calls were 8 % of the store's profiled time per message of a new conversation).
_CONVERSATION_FIELDS = tuple(f.name for f in fields(ConversationRef))
_CONVERSATION_COLUMNS = ", ".join(_CONVERSATION_FIELDS)
_CONVERSATION_INSERT = (f"INSERT INTO conversations ({_CONVERSATION_COLUMNS}, created_at, updated_at)"
                        " VALUES (:c, :key, :platform, :binding_id, :workspace, :channel, :thread, :chat_kind, :t, :t)"
                        " ON CONFLICT (key) DO NOTHING")
_RUNS = Rows(Run)  # a Run from a raw row (what the runner reads of it; nothing lazy to load)
_RUN_COLUMNS = _RUNS.columns
