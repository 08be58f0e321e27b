"""Durable state a capability keeps between runs (a plan, a cursor, a cache), by scope.

Capabilities reach it through the run context (`Turn.state`); they name the scope themselves
from what the run was granted (the conversation id, the memory scope's owner), so one
capability's state never leaks into another's and a process restart loses nothing.

Reads (`get`, `items`, `keys`) are one statement on the store's driver (`driver.read`: no ORM session,
no write lock, the same bound): planning reads its plan on every model request, where a session's
cost was most of a planning run's calls (bench/README.md, Round 13). Writes stay the ORM's.
"""

from __future__ import annotations

from sqlalchemy import delete
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.clock import Clock
from gateway.store import driver
from gateway.store.models import CapabilityStateRow

_OF = 'FROM capability_state WHERE capability = :c AND scope = :s'


class CapabilityState:
    def __init__(self, engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], clock: Clock) -> None:
        self._engine, self._sessions, self._clock = engine, sessions, clock

    async def get(self, capability: str, scope: str, key: str) -> str | None:
        def program(q: driver.Statements) -> driver.Program[str | None]:
            row = yield q.one(f'SELECT value {_OF} AND "key" = :k', c=capability, s=scope, k=key)
            return row[0] if row is not None else None

        return await driver.read(self._engine, program)

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
        def program(q: driver.Statements) -> driver.Program[dict[str, str]]:
            rows = yield q.all(f'SELECT "key", value {_OF} ORDER BY "key"', c=capability, s=scope)
            return {key: value for key, value in rows}

        return await driver.read(self._engine, program)

    async def by_scope(self, capability: str) -> dict[str, dict[str, str]]:
        """Every scope of the capability with its keys and values: one statement for a capability that keeps
        several small scopes it reads together (Stop's requests and lines, at every sweep)."""
        def program(q: driver.Statements) -> driver.Program[dict[str, dict[str, str]]]:
            rows = yield q.all('SELECT scope, "key", value FROM capability_state WHERE capability = :c'
                               ' ORDER BY scope, "key"', c=capability)
            scopes: dict[str, dict[str, str]] = {}
            for scope, key, value in rows:
                scopes.setdefault(scope, {})[key] = value
            return scopes

        return await driver.read(self._engine, program)

    async def keys(self, capability: str, scope: str) -> list[str]:
        def program(q: driver.Statements) -> driver.Program[list[str]]:
            rows = yield q.all(f'SELECT "key" {_OF} ORDER BY "key"', c=capability, s=scope)
            return [row[0] for row in rows]

        return await driver.read(self._engine, program)
