"""Pairing persistence: pending codes, paired accounts and wrong attempts, with their limits.

The limits are enforced inside the transactions, so the CLI (another process), every replica
and a restarted daemon agree; `gateway.inbound.pairing` adds what the core does with a stranger's
message (see its docstring for the rules).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.clock import Clock
from gateway.store.models import PairedAccount, PairingFailure, PairingRequest

log = logging.getLogger("gateway.inbound.pairing")

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O or 1/I: people read and type these
CODE_LENGTH = 8
CODE_TTL = timedelta(hours=1)
RESEND_AFTER = timedelta(minutes=10)
MAX_PENDING = 20
MAX_FAILURES = 5
LOCKOUT = timedelta(minutes=15)

class PairingError(Exception):
    """`approve` refused: an unknown or expired code, or approval is locked out."""


@dataclass(frozen=True, slots=True)
class PendingPairing:
    code: str
    binding_id: str
    platform: str
    account_id: str
    display_name: str
    created_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class Challenge:
    """What a stranger's message led to. `notify`: tell them the code now."""

    code: str | None
    expires_at: datetime | None
    notify: bool
    reason: str = ""


def new_code() -> str:
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def normalize_code(text: str) -> str:
    """What an admin typed, as stored: case, spaces and dashes do not matter."""
    return "".join(ch for ch in text.upper() if ch not in " -\t")


class PairingStore:
    """Store-backed pairing for every binding of one gateway."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions, self._clock = sessions, clock

    async def paired(self, binding_id: str, account_id: str) -> bool:
        async with self._sessions() as s:
            return await s.get(PairedAccount, (binding_id, account_id)) is not None

    async def request(self, binding_id: str, platform: str, workspace: str, account_id: str,
                      display_name: str) -> Challenge:
        now = self._clock.now()
        async with self._sessions() as s:
            try:
                async with s.begin():
                    await s.execute(delete(PairingRequest).where(PairingRequest.expires_at <= now))
                    row = await s.scalar(select(PairingRequest).where(
                        PairingRequest.binding_id == binding_id, PairingRequest.account_id == account_id))
                    if row is not None:
                        if now - row.notified_at < RESEND_AFTER:
                            return Challenge(row.code, row.expires_at, False, "code sent recently")
                        row.notified_at = now
                        return Challenge(row.code, row.expires_at, True)
                    pending = await s.scalar(select(func.count()).select_from(PairingRequest).where(
                        PairingRequest.binding_id == binding_id))
                    if (pending or 0) >= MAX_PENDING:
                        return Challenge(None, None, False, "too many pending codes")
                    code = new_code()
                    while await s.get(PairingRequest, code) is not None:  # 40 bits: practically never
                        code = new_code()
                    s.add(PairingRequest(code=code, binding_id=binding_id, platform=platform, workspace=workspace,
                                         account_id=account_id, display_name=display_name, created_at=now,
                                         expires_at=now + CODE_TTL, notified_at=now))
            except IntegrityError:  # the same sender's other message won the insert: it told them
                return Challenge(None, None, False, "code being issued")
        return Challenge(code, now + CODE_TTL, True)

    async def approve(self, code: str, approved_by: str = "admin") -> PendingPairing:
        """Let the code's sender in. Raises PairingError for a wrong or expired code, or when locked out."""
        code = normalize_code(code)
        now = self._clock.now()
        async with self._sessions() as s, s.begin():
            recent = list(await s.scalars(
                select(PairingFailure.failed_at).where(PairingFailure.failed_at > now - LOCKOUT)
                .order_by(PairingFailure.failed_at.desc()).limit(MAX_FAILURES)))
            if len(recent) >= MAX_FAILURES:
                until = recent[-1] + LOCKOUT
                raise PairingError(f"too many wrong codes: pairing approval is locked until {until:%H:%M} UTC")
            row = await s.get(PairingRequest, code)
            pending: PendingPairing | None = None
            if row is None or row.expires_at <= now:
                s.add(PairingFailure(failed_at=now))
            else:
                pending = _pending(row)
                await s.merge(PairedAccount(binding_id=row.binding_id, account_id=row.account_id,
                                            platform=row.platform, workspace=row.workspace,
                                            display_name=row.display_name, approved_by=approved_by,
                                            approved_at=now))
                await s.delete(row)
        if pending is None:  # raised after the commit, so the failure counts
            raise PairingError(f"no pending pairing request has code {code} (codes expire after an hour)")
        log.info("pairing: %s approved %s account %s for binding %s", approved_by, pending.platform,
                 pending.account_id, pending.binding_id)
        return pending

    async def pending(self, binding_id: str | None = None) -> list[PendingPairing]:
        now = self._clock.now()
        query = select(PairingRequest).where(PairingRequest.expires_at > now).order_by(PairingRequest.created_at)
        if binding_id is not None:
            query = query.where(PairingRequest.binding_id == binding_id)
        async with self._sessions() as s:
            return [_pending(row) for row in await s.scalars(query)]

    async def revoke(self, binding_id: str, account_id: str) -> bool:
        """Un-pair an account; True if it was paired."""
        async with self._sessions() as s, s.begin():
            result = await s.execute(delete(PairedAccount).where(
                PairedAccount.binding_id == binding_id, PairedAccount.account_id == account_id))
            return bool(result.rowcount)


def _pending(row: PairingRequest) -> PendingPairing:
    return PendingPairing(row.code, row.binding_id, row.platform, row.account_id, row.display_name,
                          row.created_at, row.expires_at)
