"""The note store (memory files): every query on notes, audits and the accounts they name.

Which store a run may touch is decided in `gateway.runs.memory` (`resolve_scope`); this module only
keeps notes durable, one short transaction a method.

What a run reads on every model request or tool call (`index`, `read`, `names`) is one statement on
the store's driver (`driver.read`: no ORM session, no write lock), about 1,900 function calls and
3.5 ms of the loop's CPU a message cheaper than a session's. Nothing is cached: every call reads the
scope it is given, so what another replica, the CLI or /memory changed is seen at the next call.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.store import driver
from gateway.store.models import Account, MemoryAudit, MemoryNote, Person

if TYPE_CHECKING:
    from gateway.store.repo import Store

PERSON, CHAT = "person", "chat"
INDEX = "MEMORY.md"
MAX_NOTE_CHARS = 20_000
MAX_NOTES = 200  # per store


@dataclass(frozen=True, slots=True)
class Scope:
    """One store: an agent's notes for one person or one chat."""

    agent_id: str
    kind: Literal["person", "chat"]
    owner: str


@dataclass(frozen=True, slots=True)
class Holder:
    """Whose notes, across every agent: one person's, or one chat's. What a person manages."""

    kind: Literal["person", "chat"]
    owner: str

    def scope(self, agent_id: str) -> Scope:
        return Scope(agent_id, self.kind, self.owner)


@dataclass(frozen=True, slots=True)
class Note:
    agent_id: str
    name: str
    content: str
    suppressed: bool
    created_at: datetime
    updated_at: datetime
    note_id: int = 0  # the row's id: what a button names, always checked against the holder

    @property
    def chars(self) -> int:
        return len(self.content)


def _note(row: MemoryNote) -> Note:
    return Note(row.agent_id, row.name, row.content, row.suppressed, row.created_at, row.updated_at, row.id)


def names_note(line: str, name: str) -> bool:
    """Whether an index line names the note (a whole name: `diet` is not named by `diet.md`)."""
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-]|\.\w)", line) is not None


def prune_index(index: str, name: str) -> tuple[str, int]:
    """Drop the index lines that name `name`; a line describing it without naming it survives."""
    kept, dropped = [], 0
    for line in index.splitlines(keepends=True):
        if names_note(line, name):
            dropped += 1
        else:
            kept.append(line)
    return "".join(kept), dropped


# One store's rows, for the driver's statements (the ORM's `NoteStore._in`); `:a`, `:k`, `:o` its scope.
_IN_SCOPE = "agent_id = :a AND scope = :k AND owner = :o"


class StoreFull(Exception):
    """The store already holds MAX_NOTES notes."""


EditResult = Literal["edited", "missing", "text_not_found", "ambiguous"]


class NoteStore:
    """The notes, in the gateway's database. Each method is one short transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store

    @staticmethod
    def _in(scope: Scope) -> tuple[object, ...]:
        return (MemoryNote.agent_id == scope.agent_id, MemoryNote.scope == scope.kind, MemoryNote.owner == scope.owner)

    # --- what the agent's tools do (suppressed notes do not exist for them) ---------------

    async def list(self, scope: Scope, limit: int) -> tuple[list[Note], int]:
        """Usable notes, most recently changed first, at most `limit`; and how many there are."""
        async with self.store.sessions() as s:
            where = (*self._in(scope), MemoryNote.suppressed.is_(False))
            total = await s.scalar(select(func.count(MemoryNote.id)).where(*where)) or 0
            rows = await s.scalars(
                select(MemoryNote).where(*where).order_by(MemoryNote.updated_at.desc(), MemoryNote.name).limit(limit)
            )
            return [_note(r) for r in rows], total

    async def names(self, scope: Scope) -> list[str]:
        def program(q: driver.Statements) -> driver.Program[list[str]]:
            rows = yield q.all(f"SELECT name FROM memory_notes WHERE {_IN_SCOPE} AND suppressed = :no ORDER BY name",
                               a=scope.agent_id, k=scope.kind, o=scope.owner, no=False)
            return [r[0] for r in rows]

        return await driver.read(self.store.engine, program)

    async def read(self, scope: Scope, name: str) -> Note | None:
        def program(q: driver.Statements) -> driver.Program[Note | None]:
            row = yield q.one(f"SELECT id, content, created_at, updated_at FROM memory_notes "
                              f"WHERE {_IN_SCOPE} AND name = :n AND suppressed = :no",
                              a=scope.agent_id, k=scope.kind, o=scope.owner, n=name, no=False)
            if row is None:
                return None
            note_id, content, created, updated = row
            return Note(scope.agent_id, name, content, False, q.time(created), q.time(updated), note_id)  # type: ignore[arg-type]

        return await driver.read(self.store.engine, program)

    async def write(self, scope: Scope, name: str, content: str) -> Literal["created", "replaced"]:
        """Create or replace a note. Writing a suppressed note's name revives it with this content."""
        now = self.store.clock.now()
        for _ in range(2):  # a concurrent first write may win the insert; then replace theirs
            async with self.store.sessions() as s:
                row = await s.scalar(select(MemoryNote).where(*self._in(scope), MemoryNote.name == name))
                if row is not None:
                    # A stopped note did not exist for the agent: to it, this is a new note.
                    created = row.suppressed
                    row.content, row.suppressed, row.updated_at = content, False, now
                    await s.commit()
                    return "created" if created else "replaced"
                count = await s.scalar(
                    select(func.count(MemoryNote.id)).where(*self._in(scope))
                ) or 0
                if count >= MAX_NOTES:
                    raise StoreFull
                s.add(MemoryNote(agent_id=scope.agent_id, scope=scope.kind, owner=scope.owner, name=name,
                                 content=content, suppressed=False, created_at=now, updated_at=now))
                try:
                    await s.commit()
                    return "created"
                except IntegrityError:
                    await s.rollback()
        raise RuntimeError("could not write the note")  # pragma: no cover - two lost races

    async def edit(self, scope: Scope, name: str, old: str, new: str) -> tuple[EditResult, int]:
        """Replace the one occurrence of `old`; the count says how many there were when not one."""
        async with self.store.sessions() as s, s.begin():
            row = await s.scalar(select(MemoryNote).where(*self._in(scope), MemoryNote.name == name))
            if row is None or row.suppressed:
                return "missing", 0
            count = row.content.count(old)
            if count == 0:
                return "text_not_found", 0
            if count > 1:
                return "ambiguous", count
            row.content = row.content.replace(old, new, 1)
            row.updated_at = self.store.clock.now()
            return "edited", 1

    async def delete(self, scope: Scope, name: str) -> tuple[bool, int]:
        """Delete a usable note and prune the index lines naming it; (deleted, lines dropped)."""
        async with self.store.sessions() as s, s.begin():
            row = await s.scalar(select(MemoryNote).where(*self._in(scope), MemoryNote.name == name))
            if row is None or row.suppressed:
                return False, 0
            await s.delete(row)
            return True, await self._prune(s, scope, name)

    async def _prune(self, s: AsyncSession, scope: Scope, name: str) -> int:
        if name == INDEX:
            return 0
        index = await s.scalar(select(MemoryNote).where(*self._in(scope), MemoryNote.name == INDEX))
        if index is None:
            return 0
        index.content, dropped = prune_index(index.content, name)
        if dropped:
            index.updated_at = self.store.clock.now()
        return dropped

    async def index(self, scope: Scope) -> str | None:
        note = await self.read(scope, INDEX)
        return note.content if note is not None else None

    # --- what a person does to their own notes, or to a chat's -----------------------------

    @staticmethod
    def _of(holder: Holder) -> tuple[object, ...]:
        return (MemoryNote.scope == holder.kind, MemoryNote.owner == holder.owner)

    async def about(self, person_id: str) -> list[Note]:
        """Every note agents keep about this person, stopped ones included, by agent then name."""
        return await self.held(Holder(PERSON, person_id))

    async def held(self, holder: Holder) -> list[Note]:
        """Every note agents keep for this person or chat, stopped ones included, by agent then name."""
        async with self.store.sessions() as s:
            rows = await s.scalars(select(MemoryNote).where(*self._of(holder))
                                   .order_by(MemoryNote.agent_id, MemoryNote.name))
            return [_note(r) for r in rows]

    async def by_id(self, holder: Holder, note_id: int) -> Note | None:
        """The note with this id, only if it is this holder's (a button names an id; the holder is ours)."""
        async with self.store.sessions() as s:
            row = await s.scalar(select(MemoryNote).where(MemoryNote.id == note_id, *self._of(holder)))
            return _note(row) if row is not None else None

    async def set_suppressed(self, person_id: str, agent_id: str, name: str, suppressed: bool) -> Note | None:
        """Stop using a note (pruning the index lines that name it), or use it again."""
        return await self.suppress(Scope(agent_id, PERSON, person_id), name, suppressed)

    async def suppress(self, scope: Scope, name: str, suppressed: bool) -> Note | None:
        async with self.store.sessions() as s, s.begin():
            row = await s.scalar(select(MemoryNote).where(*self._in(scope), MemoryNote.name == name))
            if row is None:
                return None
            row.suppressed = suppressed
            if suppressed:
                await self._prune(s, scope, name)
            return _note(row)

    async def forget(self, person_id: str, agent_id: str, name: str) -> bool:
        """Delete one of a person's notes, stopped or not, and prune the index lines naming it."""
        return await self.remove(Scope(agent_id, PERSON, person_id), name)

    async def remove(self, scope: Scope, name: str) -> bool:
        async with self.store.sessions() as s, s.begin():
            row = await s.scalar(select(MemoryNote).where(*self._in(scope), MemoryNote.name == name))
            if row is None:
                return False
            await s.delete(row)
            await self._prune(s, scope, name)
            return True

    async def erase(self, person_id: str) -> int:
        """Everything every agent keeps about this person; returns how many notes went."""
        return await self.erase_held(Holder(PERSON, person_id))

    async def erase_held(self, holder: Holder) -> int:
        async with self.store.sessions() as s, s.begin():
            result = await s.execute(delete(MemoryNote).where(*self._of(holder)))
            return result.rowcount or 0

    # --- administrators -------------------------------------------------------------------

    async def audit(self, action: Literal["show", "erase"], *, actor: str, subject: str, reason: str) -> None:
        """Record an administrator's access: who, whose, why and when; never what was seen."""
        async with self.store.sessions() as s, s.begin():
            s.add(MemoryAudit(action=action, actor=actor, subject=subject, reason=reason, at=self.store.clock.now()))

    async def audit_log(self, subject: str | None = None) -> list[MemoryAudit]:
        async with self.store.sessions() as s:
            query = select(MemoryAudit).order_by(MemoryAudit.id)
            if subject is not None:
                query = query.where(MemoryAudit.subject == subject)
            return list(await s.scalars(query))

    async def person(self, ref: str) -> str | None:
        """A person id, given one or a `platform:workspace:account` an administrator can see in the chat."""
        async with self.store.sessions() as s:
            if await s.get(Person, ref) is not None:
                return ref
            platform, _, rest = ref.partition(":")
            workspace, _, account_id = rest.rpartition(":")
            if not (platform and workspace and account_id):
                return None
            return await s.scalar(
                select(Account.person_id).where(
                    Account.platform == platform, Account.workspace == workspace, Account.account_id == account_id
                )
            )
