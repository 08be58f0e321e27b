"""People and their accounts: linking several platform accounts into one person, on purpose only.

A link is made by the person (a one-time code issued in one DM and sent back from another) or
by an admin (`agent-gateway people link`), never by matching names or e-mail addresses: a wrong
link would read one person's notes to another. Codes are random, single-use, expire after
LINK_TTL and are kept only as a SHA-256 hash. Every link and unlink is audited.

When an account joins a person, the notes its old person had (if that person has no other
account left) move along, except where a note of the same agent and name already exists: the
person's own note wins and the other stays with the old, now account-less, person (an admin can
still read it with `agent-gateway memory show`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.clock import new_id
from gateway.store.models import Account, LinkCode, MemoryNote, PeopleAudit, Person

if TYPE_CHECKING:
    from gateway.store.repo import Store

LINK_TTL = timedelta(minutes=10)
CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: people read and type these
CODE_LENGTH = 8


@dataclass(frozen=True, slots=True)
class AccountRef:
    platform: str
    workspace: str
    account_id: str
    display_name: str = ""

    def __str__(self) -> str:
        return f"{self.platform}:{self.workspace}:{self.account_id}"

    @classmethod
    def parse(cls, text: str) -> AccountRef | None:
        """`platform:workspace:account` as an admin copies it (the workspace may contain ':')."""
        platform, _, rest = text.partition(":")
        workspace, _, account_id = rest.rpartition(":")
        return cls(platform, workspace, account_id) if platform and workspace and account_id else None


@dataclass(frozen=True, slots=True)
class Linked:
    person_id: str
    already: bool = False  # the account was this person's before
    notes_moved: int = 0
    notes_kept_apart: int = 0


def _hash(code: str) -> str:
    return hashlib.sha256(normalize_code(code).encode()).hexdigest()


def normalize_code(text: str) -> str:
    """As typed: case, spaces and dashes do not matter."""
    return "".join(ch for ch in text.upper() if ch not in " -\t")


class PeopleStore:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._sessions, self._clock = store.sessions, store.clock

    async def accounts(self, person_id: str) -> list[AccountRef]:
        async with self._sessions() as s:
            rows = await s.scalars(select(Account).where(Account.person_id == person_id).order_by(Account.id))
            return [AccountRef(a.platform, a.workspace, a.account_id, a.display_name) for a in rows]

    async def person_of(self, account: AccountRef) -> str | None:
        async with self._sessions() as s:
            return await s.scalar(select(Account.person_id).where(
                Account.platform == account.platform, Account.workspace == account.workspace,
                Account.account_id == account.account_id))

    async def issue_code(self, person_id: str) -> str:
        """A fresh code for `person_id` (any earlier one of theirs stops working)."""
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            await s.execute(delete(LinkCode).where((LinkCode.expires_at <= now) | (LinkCode.person_id == person_id)))
            s.add(LinkCode(code_hash=_hash(code), person_id=person_id, created_at=now, expires_at=now + LINK_TTL))
        return code

    async def redeem(self, code: str, account: AccountRef) -> Linked | None:
        """Link `account` to the code's person; None for a code that is wrong, used or expired."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            row = await s.get(LinkCode, _hash(code))
            if row is None:
                return None
            await s.delete(row)  # single use, even when it turns out expired
            if row.expires_at <= now:
                return None
            person_id = row.person_id
        return await self.link(account, person_id, actor="self")

    async def link(self, account: AccountRef, person_id: str, *, actor: str) -> Linked:
        """Make `account` resolve to `person_id` (creating the account if it never wrote), audited."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            row = await s.scalar(select(Account).where(
                Account.platform == account.platform, Account.workspace == account.workspace,
                Account.account_id == account.account_id))
            if row is not None and row.person_id == person_id:
                return Linked(person_id, already=True)
            moved = kept = 0
            if row is None:
                s.add(Account(platform=account.platform, workspace=account.workspace, account_id=account.account_id,
                              display_name=account.display_name, person_id=person_id, created_at=now))
            else:
                old = row.person_id
                row.person_id = person_id
                await s.flush()
                others = await s.scalar(select(func.count()).select_from(Account).where(Account.person_id == old))
                if not others:
                    moved, kept = await self._move_notes(s, old, person_id)
            s.add(PeopleAudit(action="link", actor=actor, person_id=person_id, account=str(account), at=now))
        self._store.forget_identity(account.platform, account.workspace, account.account_id)
        return Linked(person_id, notes_moved=moved, notes_kept_apart=kept)

    async def _move_notes(self, s: AsyncSession, old: str, new: str) -> tuple[int, int]:
        taken = {(a, n) for a, n in await s.execute(select(MemoryNote.agent_id, MemoryNote.name).where(
            MemoryNote.scope == "person", MemoryNote.owner == new))}
        notes = list(await s.scalars(select(MemoryNote).where(MemoryNote.scope == "person", MemoryNote.owner == old)))
        movable = [n.id for n in notes if (n.agent_id, n.name) not in taken]
        if movable:
            await s.execute(update(MemoryNote).where(MemoryNote.id.in_(movable)).values(owner=new))
        return len(movable), len(notes) - len(movable)

    async def unlink(self, account: AccountRef, *, actor: str) -> str | None:
        """Give `account` a person of its own again; None when it was its person's only account.

        The notes stay with the person: they were written for the person, not for one account.
        """
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            row = await s.scalar(select(Account).where(
                Account.platform == account.platform, Account.workspace == account.workspace,
                Account.account_id == account.account_id))
            if row is None:
                return None
            others = await s.scalar(select(func.count()).select_from(Account).where(
                Account.person_id == row.person_id, Account.id != row.id))
            if not others:
                return None
            person = Person(id=new_id(), display_name=row.display_name or row.account_id, created_at=now)
            s.add(person)
            await s.flush()
            s.add(PeopleAudit(action="unlink", actor=actor, person_id=row.person_id, account=str(account), at=now))
            row.person_id = person.id
        self._store.forget_identity(account.platform, account.workspace, account.account_id)
        return person.id

    async def audit_log(self, person_id: str | None = None) -> list[PeopleAudit]:
        query = select(PeopleAudit).order_by(PeopleAudit.id)
        if person_id is not None:
            query = query.where(PeopleAudit.person_id == person_id)
        async with self._sessions() as s:
            return list(await s.scalars(query))
