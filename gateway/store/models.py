"""The tables. Portable across SQLite and PostgreSQL: text ids, timezone-aware times, JSON as text.

Schema changes go through migrations in `migrations/versions/`; these classes describe the
head revision and must match it (a test compares them).
"""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from gateway.messages import NAME_CHARS

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware in and out on both engines (SQLite stores naive text)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime: use gateway.clock.utcnow()")
        return value.astimezone(timezone.utc) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value


TS = UTCDateTime()

# A person's name (display_name, sender_name, requester_name, decided_by ...): PostgreSQL refuses a longer
# one and SQLite keeps it whole, so a name is cut where it enters the gateway (`gateway.messages.Sender`).


class Person(Base):
    __tablename__ = "people"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    display_name: Mapped[str] = mapped_column(String(NAME_CHARS), default="")
    created_at: Mapped[datetime] = mapped_column(TS)


class Account(Base):
    """A platform account; several accounts can belong to one person (linked)."""

    __tablename__ = "accounts"
    __table_args__ = (UniqueConstraint("platform", "workspace", "account_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    platform: Mapped[str] = mapped_column(String(20))
    workspace: Mapped[str] = mapped_column(String(200))
    account_id: Mapped[str] = mapped_column(String(200))
    display_name: Mapped[str] = mapped_column(String(NAME_CHARS), default="")
    person_id: Mapped[str] = mapped_column(ForeignKey("people.id"), index=True)
    created_at: Mapped[datetime] = mapped_column(TS)


class Conversation(Base):
    __tablename__ = "conversations"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[str] = mapped_column(String(500), unique=True)
    platform: Mapped[str] = mapped_column(String(20))
    binding_id: Mapped[str] = mapped_column(String(100))
    workspace: Mapped[str] = mapped_column(String(200))
    channel: Mapped[str] = mapped_column(String(200))
    thread: Mapped[str | None] = mapped_column(String(200), nullable=True)
    chat_kind: Mapped[str] = mapped_column(String(10))
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)
    title: Mapped[str | None] = mapped_column(String(200), nullable=True)  # set by the person; else the first message


class Message(Base):
    """A turn's text as the person or the agent said it. `role`: user, assistant, notice, report (a background
    run's, `gateway.runs.background`), command (a chat command as typed) or memory (a `/memory` card, drawn from
    the notes as they are when shown). `status` "private": a command or its answer, for the asker alone."""

    __tablename__ = "messages"
    __table_args__ = (Index(None, "conversation_id", "id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"))
    run_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    role: Mapped[str] = mapped_column(String(10))
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))
    person_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    account_id: Mapped[str | None] = mapped_column(String(200), nullable=True, index=True)  # conversation search
    sender_name: Mapped[str] = mapped_column(String(NAME_CHARS), default="")
    platform_message_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(TS)


class Run(Base):
    """One agent run. Queued runs are the durable queue; parked runs hold their paused state."""

    __tablename__ = "runs"
    __table_args__ = (Index(None, "conversation_id", "status"), Index(None, "status"))
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id"))
    binding_id: Mapped[str] = mapped_column(String(100))
    agent_id: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str] = mapped_column(Text, default="")
    requester_person_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    requester_account: Mapped[str | None] = mapped_column(String(200), nullable=True)
    requester_name: Mapped[str] = mapped_column(String(NAME_CHARS), default="")
    requests: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    # Media other models made for this run (gateway/store/run_costs.py): images drawn, seconds
    # transcribed, characters spoken; their dollars where priced, and how many requests had no price.
    images: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    transcribed_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    spoken_characters: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    media_cost_usd: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    media_unpriced: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    state: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(TS)
    started_at: Mapped[datetime | None] = mapped_column(TS, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(TS, nullable=True)
    # Which replica runs it, until when; a lapsed lease means that replica died.
    lease_owner: Mapped[str | None] = mapped_column(String(80), nullable=True)
    lease_expires: Mapped[datetime | None] = mapped_column(TS, nullable=True)
    # "turn": answers what people said; "report": continues after a background run reported back
    # (no message of a person joins it, and it runs as the person who started the background run).
    kind: Mapped[str] = mapped_column(String(20), default="turn", server_default="turn")


class BackgroundRun(Base):
    """A delegation detached from the turn that started it (`subagents` mode async): its own stored run
    under the conversation, with transcript, usage and outcome; when it ends, a `report` run is queued."""

    __tablename__ = "background_runs"
    __table_args__ = (Index(None, "conversation_id", "status"), Index(None, "status"))
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(String(40))
    parent_run_id: Mapped[str] = mapped_column(String(40), index=True)
    binding_id: Mapped[str] = mapped_column(String(100))
    agent_id: Mapped[str] = mapped_column(String(100))  # the parent agent
    delegate: Mapped[str] = mapped_column(String(100))  # the name the parent's model called it by
    kind: Mapped[str] = mapped_column(String(20))  # pinned | specialist
    prompt: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20))  # running, then finished | failed | stopped | partial
    reason: Mapped[str] = mapped_column(Text, default="")
    answer: Mapped[str] = mapped_column(Text, default="")
    transcript: Mapped[str] = mapped_column(Text, default="[]")  # pydantic-ai messages as JSON, saved as it goes
    requester_person_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    requester_account: Mapped[str | None] = mapped_column(String(200), nullable=True)
    requester_name: Mapped[str] = mapped_column(String(NAME_CHARS), default="")
    requests: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    report_run_id: Mapped[str | None] = mapped_column(String(40), nullable=True)  # the queued report, once ended
    stop_requested_by: Mapped[str | None] = mapped_column(String(200), nullable=True)  # a Stop from another replica
    created_at: Mapped[datetime] = mapped_column(TS)
    finished_at: Mapped[datetime | None] = mapped_column(TS, nullable=True)
    lease_owner: Mapped[str | None] = mapped_column(String(80), nullable=True)
    lease_expires: Mapped[datetime | None] = mapped_column(TS, nullable=True)


class InboundEvent(Base):
    """The inbound ledger: one row per (binding, platform event id); the unique key dedupes."""

    __tablename__ = "inbound_ledger"
    __table_args__ = (UniqueConstraint("binding_id", "event_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    binding_id: Mapped[str] = mapped_column(String(100))
    event_id: Mapped[str] = mapped_column(String(300))
    received_at: Mapped[datetime] = mapped_column(TS)


class Delivery(Base):
    """One posted platform message of a reply: a draft edited in place, then final."""

    __tablename__ = "deliveries"
    __table_args__ = (UniqueConstraint("run_id", "seq"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(40))
    seq: Mapped[int] = mapped_column(Integer)
    platform_message_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    text: Mapped[str] = mapped_column(Text, default="")
    final: Mapped[bool] = mapped_column(Boolean, default=False)
    updated_at: Mapped[datetime] = mapped_column(TS)


class AdapterState(Base):
    __tablename__ = "adapter_state"
    binding_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class ApprovalCardRow(Base):
    """One card: all gated calls of one model response, posted once into the conversation."""

    __tablename__ = "approval_cards"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # unguessable
    run_id: Mapped[str] = mapped_column(String(40), index=True)
    conversation_id: Mapped[str] = mapped_column(String(40))
    binding_id: Mapped[str] = mapped_column(String(100))
    card_ref: Mapped[str | None] = mapped_column(String(200), nullable=True)  # the platform's message id
    deciders: Mapped[str] = mapped_column(Text)  # JSON: "requester" | "channel" | [accounts]
    state: Mapped[str] = mapped_column(String(20))  # pending, decided, expired
    created_at: Mapped[datetime] = mapped_column(TS)
    expires_at: Mapped[datetime] = mapped_column(TS, index=True)


class ApprovalRow(Base):
    """One gated tool call and its decision. The first decision wins (a conditional update)."""

    __tablename__ = "approvals"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # unguessable
    card_id: Mapped[str] = mapped_column(ForeignKey("approval_cards.id"), index=True)
    run_id: Mapped[str] = mapped_column(String(40), index=True)
    conversation_id: Mapped[str] = mapped_column(String(40), index=True)
    tool_call_id: Mapped[str] = mapped_column(String(200))
    tool_id: Mapped[str] = mapped_column(String(200))  # the stable id the policy is keyed on
    tool_name: Mapped[str] = mapped_column(String(200))  # the name the model saw
    capability: Mapped[str] = mapped_column(String(100))
    arguments: Mapped[str] = mapped_column(Text)  # shown on the card, in full: secrets masked, never cut
    # sha256 of the canonical JSON of the arguments the tool would receive: the decision is bound to it
    # (None on items stored before migration 0013, whose decision is then not applied).
    arguments_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    state: Mapped[str] = mapped_column(String(20))
    decided_by: Mapped[str | None] = mapped_column(String(200), nullable=True)
    decided_by_account: Mapped[str | None] = mapped_column(String(200), nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(TS, nullable=True)
    surface: Mapped[str | None] = mapped_column(String(40), nullable=True)
    position: Mapped[int] = mapped_column(Integer)
    # Set when a sync delegate made the call: who asked (shown on the card), and the run's own `task`
    # call it was made inside (what the run is resumed on, with this decision handed down).
    delegate: Mapped[str | None] = mapped_column(String(200), nullable=True)
    parent_call_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(TS)


class ConversationMode(Base):
    """Per-conversation approval modes switched from the chat, with who switched them."""

    __tablename__ = "conversation_modes"
    conversation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    approve_all: Mapped[bool] = mapped_column(Boolean, default=False)
    ask_every_tool: Mapped[bool] = mapped_column(Boolean, default=False)
    changed_by: Mapped[str] = mapped_column(String(200), default="")
    changed_at: Mapped[datetime] = mapped_column(TS)


class MemoryNote(Base):
    """One note an agent keeps: in a person's store or a chat's, never both (`scope`, `owner`).

    `suppressed` is the person's "stop using it": no tool lists, reads or edits the note, but the
    row and its name stay, so the person can look at it and restore it.
    """

    __tablename__ = "memory_notes"
    __table_args__ = (UniqueConstraint("agent_id", "scope", "owner", "name"), Index(None, "scope", "owner"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    agent_id: Mapped[str] = mapped_column(String(100))
    scope: Mapped[str] = mapped_column(String(10))  # "person" | "chat"
    owner: Mapped[str] = mapped_column(String(500))  # a person id, or platform:workspace:channel
    name: Mapped[str] = mapped_column(String(200))
    content: Mapped[str] = mapped_column(Text)
    suppressed: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class MemoryAudit(Base):
    """An administrator's read or erasure of someone's notes: who, whose, why, when; never content."""

    __tablename__ = "memory_audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column(String(20))  # "show" | "erase"
    actor: Mapped[str] = mapped_column(String(200))
    subject: Mapped[str] = mapped_column(String(40), index=True)  # the person id
    reason: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(TS)


class PairingRequest(Base):
    """A pending pairing code: someone the binding does not know asked to talk to it in private."""

    __tablename__ = "pairing_requests"
    __table_args__ = (UniqueConstraint("binding_id", "account_id"),)
    code: Mapped[str] = mapped_column(String(16), primary_key=True)
    binding_id: Mapped[str] = mapped_column(String(100))
    platform: Mapped[str] = mapped_column(String(20))
    workspace: Mapped[str] = mapped_column(String(200))
    account_id: Mapped[str] = mapped_column(String(200))
    display_name: Mapped[str] = mapped_column(String(NAME_CHARS), default="")
    created_at: Mapped[datetime] = mapped_column(TS)
    expires_at: Mapped[datetime] = mapped_column(TS, index=True)
    notified_at: Mapped[datetime] = mapped_column(TS)  # when the code was last told to the sender


class PairedAccount(Base):
    """A platform account an admin let in: the binding admits its direct messages."""

    __tablename__ = "paired_accounts"
    binding_id: Mapped[str] = mapped_column(String(100), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    platform: Mapped[str] = mapped_column(String(20))
    workspace: Mapped[str] = mapped_column(String(200))
    display_name: Mapped[str] = mapped_column(String(NAME_CHARS), default="")
    approved_by: Mapped[str] = mapped_column(String(200))
    approved_at: Mapped[datetime] = mapped_column(TS)


class PairingFailure(Base):
    """One wrong or expired code given to `pairing approve`; enough of them lock approval out."""

    __tablename__ = "pairing_failures"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    failed_at: Mapped[datetime] = mapped_column(TS, index=True)


class CapabilityStateRow(Base):
    """A value a capability keeps between runs, under a scope it names (a conversation, a person, an agent)."""

    __tablename__ = "capability_state"
    capability: Mapped[str] = mapped_column(String(100), primary_key=True)
    scope: Mapped[str] = mapped_column(String(500), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS)


class ModeChange(Base):
    """One switch of a conversation's approval modes: who, from where, to what, when (the audit)."""

    __tablename__ = "mode_changes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(String(40), index=True)
    who: Mapped[str] = mapped_column(String(200))
    account_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    surface: Mapped[str] = mapped_column(String(40))  # "command", "button", "api"
    approve_all: Mapped[bool] = mapped_column(Boolean)
    ask_every_tool: Mapped[bool] = mapped_column(Boolean)
    at: Mapped[datetime] = mapped_column(TS)


class LinkCode(Base):
    """A one-time code that makes another account this person: only its hash is kept."""

    __tablename__ = "link_codes"
    code_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    person_id: Mapped[str] = mapped_column(String(40))
    created_at: Mapped[datetime] = mapped_column(TS)
    expires_at: Mapped[datetime] = mapped_column(TS, index=True)


class PeopleAudit(Base):
    """One link or unlink: who did it (the person themselves, or an admin), which account, when."""

    __tablename__ = "people_audit"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action: Mapped[str] = mapped_column(String(20))  # "link" | "unlink"
    actor: Mapped[str] = mapped_column(String(200))  # "self" or the admin's name
    person_id: Mapped[str] = mapped_column(String(40), index=True)
    account: Mapped[str] = mapped_column(String(500))  # platform:workspace:account
    at: Mapped[datetime] = mapped_column(TS)


class KnowledgeDocument(Base):
    """One file of a knowledge collection as last indexed; `content_hash` makes re-indexing incremental.

    Its chunks' full-text index (FTS5 on SQLite, a generated tsvector column with a GIN index on PostgreSQL) lives only in
    the database: see gateway/store/fulltext.py and migration 0008.
    """

    __tablename__ = "knowledge_documents"
    __table_args__ = (UniqueConstraint("collection", "path"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    collection: Mapped[str] = mapped_column(String(100))
    path: Mapped[str] = mapped_column(String(1000))  # relative to the collection's folder
    content_hash: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(500))
    indexed_at: Mapped[datetime] = mapped_column(TS)


class KnowledgeChunk(Base):
    """A passage of a document under one heading; `anchor` is the heading's stable citation slug."""

    __tablename__ = "knowledge_chunks"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("knowledge_documents.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    heading: Mapped[str] = mapped_column(String(500))
    anchor: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)


class StreamEvent(Base):
    """One event of a web conversation's live stream, kept a few minutes so that the other replicas
    on a shared PostgreSQL database can show it to their browsers (`gateway/http/event_relay.py`).

    NOTIFY only says "conversation X has news"; the event itself is read from here, so a payload
    over NOTIFY's 8,000 bytes and a replica whose LISTEN connection dropped both still get it.
    """

    __tablename__ = "stream_events"
    __table_args__ = (Index(None, "conversation_id", "created_at"), Index(None, "created_at"))
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(String(40))
    origin: Mapped[str] = mapped_column(String(80))  # the replica that published it (`Store.owner`)
    body: Mapped[str] = mapped_column(Text)  # the event as JSON
    created_at: Mapped[datetime] = mapped_column(TS)  # the database's clock, so replicas agree


class ScheduledTask(Base):
    """Work that fires on its own (`gateway.runs.schedules`): once `at` an instant, or on a `cron` in its
    `timezone`. A person's task was made in a conversation and posts there; an admin's comes from a binding
    file (`name` there) and posts to its channel's own conversation. `next_at` is the occurrence due next."""

    __tablename__ = "scheduled_tasks"
    __table_args__ = (Index(None, "status", "next_at"), Index(None, "conversation_id"))
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    conversation_id: Mapped[str] = mapped_column(String(40))
    binding_id: Mapped[str] = mapped_column(String(100))
    origin: Mapped[str] = mapped_column(String(10))  # chat | admin
    name: Mapped[str] = mapped_column(String(200), default="")  # an admin schedule's key in its binding file
    task: Mapped[str] = mapped_column(Text)
    cron: Mapped[str | None] = mapped_column(String(100), nullable=True)
    at: Mapped[datetime | None] = mapped_column(TS, nullable=True)
    timezone: Mapped[str] = mapped_column(String(64))
    catch_up: Mapped[bool] = mapped_column(Boolean)  # run an occurrence missed while down (late), or skip it
    status: Mapped[str] = mapped_column(String(20))  # active | paused | cancelled | done
    reason: Mapped[str] = mapped_column(Text, default="")  # why paused or cancelled
    next_at: Mapped[datetime | None] = mapped_column(TS, nullable=True)
    creator_person_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    creator_account: Mapped[str | None] = mapped_column(String(200), nullable=True)
    creator_name: Mapped[str] = mapped_column(String(200), default="")
    last_run_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    created_at: Mapped[datetime] = mapped_column(TS)
    updated_at: Mapped[datetime] = mapped_column(TS)


class ScheduleOccurrence(Base):
    """One occurrence of a task, claimed before it runs: the primary key (task, due time) is what makes
    it run once, whichever replica's sweep gets there first."""

    __tablename__ = "schedule_occurrences"
    task_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    due_at: Mapped[datetime] = mapped_column(TS, primary_key=True)
    outcome: Mapped[str] = mapped_column(String(20))  # fired | missed
    run_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    late: Mapped[bool] = mapped_column(Boolean)
    claimed_by: Mapped[str] = mapped_column(String(80))
    claimed_at: Mapped[datetime] = mapped_column(TS)
