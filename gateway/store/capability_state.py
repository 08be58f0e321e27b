"""Durable state a capability keeps between runs (a plan, a cursor, a cache), by scope.

Capabilities reach it through the run context (`Turn.state`); they name the scope themselves
from what the run was granted (the conversation id, the memory scope's owner), so one
capability's state never leaks into another's and a process restart loses nothing.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.clock import Clock
from gateway.store.models import CapabilityStateRow


class CapabilityState:
    def __init__(self, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._sessions, self._clock = sessions, clock

    async def get(self, capability: str, scope: str, key: str) -> str | None:
        async with self._sessions() as s:
            row = await s.get(CapabilityStateRow, (capability, scope, key))
            return row.value if row is not None else None

    async def put(self, capability: str, scope: str, key: str, value: str) -> None:
        async with self._sessions() as s, s.begin():
            await s.merge(CapabilityStateRow(capability=capability, scope=scope, key=key, value=value,
                                             updated_at=self._clock.now()))

    async def add(self, capability: str, scope: str, key: str, value: str) -> bool:
        """Store `key` only if it is absent; False when it was already there (another process, another
        replica took it first). A count kept as one key per item is race-free this way."""
        try:
            async with self._sessions() as s, s.begin():
                s.add(CapabilityStateRow(capability=capability, scope=scope, key=key, value=value,
                                         updated_at=self._clock.now()))
        except IntegrityError:
            return False
        return True

    async def delete(self, capability: str, scope: str, key: str | None = None) -> int:
        """Delete one key, or every key of the scope when `key` is None; returns how many."""
        query = delete(CapabilityStateRow).where(CapabilityStateRow.capability == capability,
                                                 CapabilityStateRow.scope == scope)
        if key is not None:
            query = query.where(CapabilityStateRow.key == key)
        async with self._sessions() as s, s.begin():
            return (await s.execute(query)).rowcount or 0

    async def items(self, capability: str, scope: str) -> dict[str, str]:
        """Every key of the scope with its value, in key order (a workspace's files, for a listing or a search)."""
        async with self._sessions() as s:
            rows = await s.execute(select(CapabilityStateRow.key, CapabilityStateRow.value).where(
                CapabilityStateRow.capability == capability, CapabilityStateRow.scope == scope)
                .order_by(CapabilityStateRow.key))
            return {key: value for key, value in rows}

    async def keys(self, capability: str, scope: str) -> list[str]:
        async with self._sessions() as s:
            return list(await s.scalars(select(CapabilityStateRow.key).where(
                CapabilityStateRow.capability == capability, CapabilityStateRow.scope == scope)
                .order_by(CapabilityStateRow.key)))
