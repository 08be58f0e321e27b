"""Approval persistence: cards, their items, decisions, expiry, and a conversation's modes.

The service (`gateway.approvals.service`) decides what may happen; these queries make it durable and
atomic: a decision is a conditional update, so the first click wins on any replica, and a
parked run goes back to its queue from exactly one decider's transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.clock import Clock, unguessable_id
from gateway.approvals.policy import Modes
from gateway.store import driver
from gateway.store.models import Account, ApprovalCardRow, ApprovalRow, Conversation, ConversationMode, Message, ModeChange, Run
from gateway.store.repo import EXPIRED, PARKED, QUEUED, STOPPED


@dataclass(frozen=True, slots=True)
class NewItem:
    tool_call_id: str
    tool_id: str
    tool_name: str
    capability: str
    arguments: str  # shown in full: secrets masked, never cut
    arguments_digest: str | None  # sha256 of the canonical arguments the decision is bound to
    delegate: str | None = None  # the delegate that made the call (None: the run's own agent)
    parent_call_id: str | None = None  # the run's `task` call it was made inside


@dataclass(frozen=True, slots=True)
class Speaker:
    """Someone who has asked the agent something in a conversation."""

    person_id: str | None
    account_id: str | None
    name: str


@dataclass(frozen=True, slots=True)
class Expired:
    card_id: str
    run_id: str
    conversation_id: str
    items: int


class ApprovalStore:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions, self._clock = sessions, clock
        self._engine = sessions.kw["bind"]  # for the reads on the driver

    # --- modes --------------------------------------------------------------------------

    async def modes(self, conversation_id: str) -> Modes:
        async with self._sessions() as s:
            row = await s.get(ConversationMode, conversation_id)
            return Modes(row.approve_all, row.ask_every_tool) if row else Modes()

    async def set_modes(self, conversation_id: str, *, who: str, account_id: str | None, surface: str,
                        approve_all: bool | None, ask_every_tool: bool | None) -> Modes:
        """Switch a mode (the two exclude each other) and audit the switch, in one transaction."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            row = await s.get(ConversationMode, conversation_id)
            if row is None:
                row = ConversationMode(conversation_id=conversation_id, approve_all=False, ask_every_tool=False,
                                       changed_by=who, changed_at=now)
                s.add(row)
            if approve_all is not None:
                row.approve_all = approve_all
                if approve_all:
                    row.ask_every_tool = False
            if ask_every_tool is not None:
                row.ask_every_tool = ask_every_tool
                if ask_every_tool:
                    row.approve_all = False
            row.changed_by, row.changed_at = who, now
            s.add(ModeChange(conversation_id=conversation_id, who=who, account_id=account_id, surface=surface,
                             approve_all=row.approve_all, ask_every_tool=row.ask_every_tool, at=now))
            return Modes(row.approve_all, row.ask_every_tool)

    async def mode_changes(self, conversation_id: str | None = None) -> list[ModeChange]:
        query = select(ModeChange).order_by(ModeChange.at, ModeChange.id)
        if conversation_id:
            query = query.where(ModeChange.conversation_id == conversation_id)
        async with self._sessions() as s:
            return list(await s.scalars(query))

    async def speakers(self, conversation_id: str) -> list[Speaker]:
        """Everyone who has asked the agent something here, in order of their first message."""
        return await self._speakers(Message.conversation_id == conversation_id)

    async def chat_speakers(self, platform: str, workspace: str, channel: str) -> list[Speaker]:
        """Everyone who has asked the agent something in any conversation of one chat (its threads,
        under any binding): the people whose runs a group chat's notes serve (`memory.chat_owner`)."""
        in_chat = select(Conversation.id).where(Conversation.platform == platform, Conversation.workspace == workspace,
                                                Conversation.channel == channel)
        return await self._speakers(Message.conversation_id.in_(in_chat))

    async def _speakers(self, where: ColumnElement[bool]) -> list[Speaker]:
        # One row per account, not per message: a busy chat's history stays in the database.
        async with self._sessions() as s:
            rows = await s.execute(
                select(Message.person_id, Message.account_id, func.min(Message.sender_name))
                .where(where, Message.role == "user")
                .group_by(Message.person_id, Message.account_id)
                .order_by(func.min(Message.created_at), func.min(Message.id))
            )
        seen: dict[str, Speaker] = {}
        for person_id, account_id, name in rows:
            key = person_id or account_id or name
            if key not in seen:
                seen[key] = Speaker(person_id, account_id, name)
        return list(seen.values())

    # --- cards --------------------------------------------------------------------------

    async def create_card(self, *, run_id: str, conversation_id: str, binding_id: str, deciders: Any,
                          expires_at: datetime, items: list[NewItem]) -> str:
        """A pending card for the run's calls. A pending card the run made before (a process died
        between making it and parking the run, so the run ran again and asked again) is closed
        as replaced, in the same transaction: only the newest card can be decided."""
        card_id = unguessable_id()
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            older = list(await s.scalars(select(ApprovalCardRow.id).where(ApprovalCardRow.run_id == run_id,
                                                                         ApprovalCardRow.state == "pending")))
            if older:
                await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id.in_(older))
                                .values(state="replaced"))
                await s.execute(update(ApprovalRow).where(ApprovalRow.card_id.in_(older), ApprovalRow.state == "pending")
                                .values(state="expired", decided_at=now))
            s.add(ApprovalCardRow(id=card_id, run_id=run_id, conversation_id=conversation_id, binding_id=binding_id,
                                  card_ref=None, deciders=json.dumps(deciders), state="pending", created_at=now,
                                  expires_at=expires_at))
            await s.flush()
            for i, item in enumerate(items):
                s.add(ApprovalRow(id=unguessable_id(), card_id=card_id, run_id=run_id,
                                  conversation_id=conversation_id, tool_call_id=item.tool_call_id,
                                  tool_id=item.tool_id, tool_name=item.tool_name, capability=item.capability,
                                  arguments=item.arguments, arguments_digest=item.arguments_digest, state="pending", position=i, created_at=now,
                                  delegate=item.delegate, parent_call_id=item.parent_call_id))
        return card_id

    async def unshown(self, *, older_than: datetime | None) -> list[str]:
        """Pending cards of parked runs that no platform message shows (their process died before
        the card was posted, or posting failed): shown again so they can be decided."""
        def program(q: driver.Statements) -> driver.Program[list[str]]:  # every sweep asks: on the driver
            rows = yield q.all("SELECT c.id FROM approval_cards c JOIN runs r ON r.id = c.run_id"
                               " WHERE c.state = 'pending' AND c.card_ref IS NULL AND r.status = :parked"
                               + ("" if older_than is None else " AND c.created_at <= :older")
                               + " ORDER BY c.created_at", parked=PARKED, older=older_than)
            return [r[0] for r in rows]

        return await driver.read(self._engine, program)

    async def set_card_ref(self, card_id: str, ref: str | None) -> None:
        async with self._sessions() as s, s.begin():
            await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id == card_id).values(card_ref=ref))

    async def card(self, card_id: str) -> tuple[ApprovalCardRow, list[ApprovalRow], Run | None] | None:
        async with self._sessions() as s:
            row = await s.get(ApprovalCardRow, card_id)
            if row is None:
                return None
            items = list(await s.scalars(select(ApprovalRow).where(ApprovalRow.card_id == card_id)
                                         .order_by(ApprovalRow.position)))
            return row, items, await s.get(Run, row.run_id)

    async def cards_of(self, conversation_id: str) -> list[tuple[str, datetime]]:
        async with self._sessions() as s:
            rows = await s.execute(select(ApprovalCardRow.id, ApprovalCardRow.created_at)
                                   .where(ApprovalCardRow.conversation_id == conversation_id)
                                   .order_by(ApprovalCardRow.created_at))
            return [(card_id, created) for card_id, created in rows]

    async def target_of(self, approval_id: str) -> tuple[ApprovalRow | None, ApprovalCardRow, Run | None] | None:
        """The item (None when the id is a whole card's), its card and its run."""
        async with self._sessions() as s:
            item = await s.get(ApprovalRow, approval_id)
            card = await s.get(ApprovalCardRow, item.card_id if item else approval_id)
            if card is None:
                return None
            return item, card, await s.get(Run, card.run_id)

    # --- deciding -----------------------------------------------------------------------

    async def decide(self, *, card_id: str, approval_id: str | None, state: str, who: str, account_id: str,
                     surface: str) -> tuple[int, bool]:
        """Decide one pending item (or every pending item of the card): how many this call won, and
        whether it put the parked run back in its queue (the card's last pending item). One
        transaction, so no crash can leave a card fully decided with its run still parked."""
        where = [ApprovalRow.state == "pending"]
        where.append(ApprovalRow.id == approval_id if approval_id is not None else ApprovalRow.card_id == card_id)
        async with self._sessions() as s, s.begin():
            await _lock_card(s, ApprovalCardRow.id == card_id)
            result = await s.execute(update(ApprovalRow).where(*where).values(
                state=state, decided_by=who, decided_by_account=account_id, decided_at=self._clock.now(),
                surface=surface))
            won = result.rowcount or 0
            return won, await self._requeue_if_decided(s, card_id)

    @staticmethod
    async def _requeue_if_decided(s: AsyncSession, card_id: str) -> bool:
        pending = (await s.scalars(select(ApprovalRow.id).where(ApprovalRow.card_id == card_id,
                                                                ApprovalRow.state == "pending"))).first()
        if pending is not None:
            return False
        card = await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id == card_id,
                                                             ApprovalCardRow.state == "pending")
                               .values(state="decided").returning(ApprovalCardRow.run_id))
        run_id = card.scalar()
        return run_id is not None and await _requeue_parked(s, run_id)

    async def requeue_decided(self, card_id: str) -> bool:
        """Put a just-parked run back in its queue if its card was decided before it was parked:
        that decision found no parked run to requeue (`_requeue_if_decided`), and nothing else
        would ever requeue it. Whoever finds the run parked moves it, once."""
        async with self._sessions() as s, s.begin():
            card = await s.get(ApprovalCardRow, card_id)
            return card is not None and card.state == "decided" and await _requeue_parked(s, card.run_id)

    async def decided_item(self, approval_id: str | None, card_id: str) -> ApprovalRow | None:
        """What someone else decided first (for "Already approved by …")."""
        query = select(ApprovalRow).where(ApprovalRow.card_id == card_id, ApprovalRow.state != "pending")
        if approval_id:
            query = select(ApprovalRow).where(ApprovalRow.id == approval_id)
        async with self._sessions() as s:
            return (await s.scalars(query)).first()

    async def person_of(self, platform: str, workspace: str, account_id: str) -> str | None:
        async with self._sessions() as s:
            return await s.scalar(select(Account.person_id).where(
                Account.platform == platform, Account.workspace == workspace, Account.account_id == account_id))

    async def accounts_of(self, ref: str, platform: str, workspace: str) -> list[tuple[str, str]]:
        """(account id, display name) on one platform and workspace for `ref`: a person id (its accounts
        there), or `platform:account` / `platform:workspace:account` (that account, if it is there, and
        the accounts linked to its person)."""
        kind, _, rest = ref.partition(":")
        named: str | None = None
        async with self._sessions() as s:
            if rest:
                space, _, account = rest.rpartition(":")
                if kind == platform and (not space or space == workspace):
                    named = account
                where = [Account.platform == kind, Account.account_id == account]
                person = await s.scalar(select(Account.person_id).where(*where, *([Account.workspace == space] if space else [])))
            else:
                person = ref
            rows = list(await s.execute(select(Account.account_id, Account.display_name).where(
                Account.person_id == person, Account.platform == platform, Account.workspace == workspace)
                .order_by(Account.id))) if person else []
        found = [(a, n) for a, n in rows]
        if named is not None and named not in {a for a, _ in found}:
            found.insert(0, (named, ""))
        return found

    async def latest_decisions(self, run_id: str) -> list[ApprovalRow]:
        """The items of a run's latest card, as decided."""
        async with self._sessions() as s:
            card = (await s.scalars(select(ApprovalCardRow).where(ApprovalCardRow.run_id == run_id)
                                    .order_by(ApprovalCardRow.created_at.desc()))).first()
            return list(await s.scalars(select(ApprovalRow).where(ApprovalRow.card_id == card.id))) if card else []

    # --- expiry -------------------------------------------------------------------------

    async def expire_due(self) -> list[Expired]:
        """Expire every pending card past its time and end its run as expired; each card once, on any replica."""
        now = self._clock.now()

        def program(q: driver.Statements) -> driver.Program[list[driver.Row]]:  # checked every minute: on the driver
            rows: list[driver.Row] = yield q.all("SELECT id, run_id, conversation_id FROM approval_cards"
                                                 " WHERE state = 'pending' AND expires_at <= :now", now=now)
            return rows

        expired: list[Expired] = []
        for card_id, run_id, conversation_id in await driver.read(self._engine, program):
            async with self._sessions() as s, s.begin():
                claimed = await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id == card_id,
                                                                        ApprovalCardRow.state == "pending")
                                          .values(state="expired"))
                if not claimed.rowcount:
                    continue  # another replica got it
                result = await s.execute(update(ApprovalRow).where(ApprovalRow.card_id == card_id,
                                                                   ApprovalRow.state == "pending")
                                         .values(state="expired", decided_at=now))
                await s.execute(update(Run).where(Run.id == run_id, Run.status == PARKED)
                                .values(status=EXPIRED, reason="approval timed out", finished_at=now, state=None))
            expired.append(Expired(card_id, run_id, conversation_id, result.rowcount or 0))
        return expired

    async def close_for_stop(self, run_id: str, *, who: str, account_id: str) -> Expired | None:
        """A person stopped a parked run: its open card is closed (its calls denied by them) and the run
        ends `stopped`; None when it was no longer parked (decided, expired or stopped on another door)."""
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            card = await _lock_card(s, ApprovalCardRow.run_id == run_id, ApprovalCardRow.state == "pending")
            ended = await s.execute(update(Run).where(Run.id == run_id, Run.status == PARKED)
                                    .values(status=STOPPED, reason=f"stopped by {who}", finished_at=now, state=None))
            if not ended.rowcount:
                return None
            if card is None:
                return None
            await s.execute(update(ApprovalCardRow).where(ApprovalCardRow.id == card.id).values(state="stopped"))
            result = await s.execute(update(ApprovalRow).where(ApprovalRow.card_id == card.id,
                                                               ApprovalRow.state == "pending")
                                     .values(state="denied", decided_by=who, decided_by_account=account_id,
                                             decided_at=now, surface="stop"))
        return Expired(card.id, run_id, card.conversation_id, result.rowcount or 0)

    # --- reading ------------------------------------------------------------------------

    async def decisions(self, conversation_id: str | None = None) -> list[ApprovalRow]:
        query = select(ApprovalRow).order_by(ApprovalRow.created_at, ApprovalRow.position)
        if conversation_id:
            query = query.where(ApprovalRow.conversation_id == conversation_id)
        async with self._sessions() as s:
            return list(await s.scalars(query))


async def _lock_card(s: AsyncSession, *where: ColumnElement[bool]) -> ApprovalCardRow | None:
    """The card's row, locked (PostgreSQL) before its items or its run: every writer of a card and
    its items takes them in that order (card, items, run). `decide` took the items first and
    deadlocked against a run that asked again after a restart (`create_card` closing the card it
    had made before), which the database ended by failing one of them (tests/chaos, PostgreSQL)."""
    return (await s.scalars(select(ApprovalCardRow).where(*where).with_for_update())).first()


async def _requeue_parked(s: AsyncSession, run_id: str) -> bool:
    """The run back in its queue if it is parked (whoever finds it parked moves it, once)."""
    moved = await s.execute(update(Run).where(Run.id == run_id, Run.status == PARKED).values(status=QUEUED))
    return bool(moved.rowcount)
