"""Transactions on the database driver itself, for the statements every message runs.

A message costs a few short transactions: ingest, claim, the reply's delivery rows, the run's
end. Through SQLAlchemy's async ORM each statement costs about 0.3 ms of Python and each
transaction another 0.1 ms; the driver answers the same statement in tens of microseconds. So
`Store`'s per-message methods write plain, portable SQL here, once, with `:name` parameters;
everything else in the store uses the ORM.

On PostgreSQL the raw asyncpg connection is checked out of the engine's pool. On SQLite the
engine's one inline connection is used directly while the pool holds it idle (a checkout costs
more than the transaction), else it is checked out like the ORM's sessions do (inline_sqlite).
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncEngine

from . import inline_sqlite

Row = tuple[Any, ...]


class Tx(Protocol):
    """One open transaction. Datetimes go in aware and come out aware (UTC)."""

    async def all(self, sql: str, **params: Any) -> list[Row]: ...

    async def one(self, sql: str, **params: Any) -> Row | None: ...

    async def run(self, sql: str, **params: Any) -> int:
        """Execute; the number of rows changed."""
        ...

    def time(self, value: Any) -> datetime | None:
        """A timestamp column's value as read back."""
        ...


# SQLAlchemy's SQLite DATETIME text, so rows written here and by the ORM compare and sort alike.
_SQLITE_TIME = "%Y-%m-%d %H:%M:%S.%f"


class _SqliteTx:
    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @staticmethod
    def _bind(params: dict[str, Any]) -> dict[str, Any]:
        for k, v in params.items():
            if isinstance(v, datetime):
                params[k] = v.astimezone(timezone.utc).strftime(_SQLITE_TIME)
        return params

    async def all(self, sql: str, **params: Any) -> list[Row]:
        return self._conn.execute(sql, self._bind(params)).fetchall()  # type: ignore[no-any-return]

    async def one(self, sql: str, **params: Any) -> Row | None:
        return self._conn.execute(sql, self._bind(params)).fetchone()  # type: ignore[no-any-return]

    async def run(self, sql: str, **params: Any) -> int:
        return self._conn.execute(sql, self._bind(params)).rowcount  # type: ignore[no-any-return]

    def time(self, value: Any) -> datetime | None:
        if value is None:
            return None
        return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)


_NAME = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


class _AsyncpgTx:
    _compiled: dict[str, tuple[str, tuple[str, ...]]] = {}

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    @classmethod
    def _sql(cls, sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
        compiled = cls._compiled.get(sql)
        if compiled is None:
            names: list[str] = []

            def number(m: re.Match[str]) -> str:
                if m.group(1) not in names:
                    names.append(m.group(1))
                return f"${names.index(m.group(1)) + 1}"

            compiled = cls._compiled[sql] = (_NAME.sub(number, sql), tuple(names))
        text, names = compiled
        return text, [params[n] for n in names]

    async def all(self, sql: str, **params: Any) -> list[Row]:
        text, args = self._sql(sql, params)
        return [tuple(r) for r in await self._conn.fetch(text, *args)]

    async def one(self, sql: str, **params: Any) -> Row | None:
        text, args = self._sql(sql, params)
        row = await self._conn.fetchrow(text, *args)
        return tuple(row) if row is not None else None

    async def run(self, sql: str, **params: Any) -> int:
        text, args = self._sql(sql, params)
        status = await self._conn.execute(text, *args)  # e.g. "UPDATE 3", "INSERT 0 1"
        tail = status.rsplit(" ", 1)[-1]
        return int(tail) if tail.isdigit() else 0

    def time(self, value: Any) -> datetime | None:
        return value  # type: ignore[no-any-return]


@contextlib.asynccontextmanager
async def transaction(engine: AsyncEngine) -> AsyncIterator[Tx]:
    """A write transaction on a raw connection: committed on exit, rolled back on error.

    On SQLite the body must not await anything that suspends (it runs on the loop, holding the
    one connection); the Store's per-message methods only await their Tx.
    """
    if engine.dialect.name == "sqlite":
        inline = inline_sqlite.idle_connection(engine.sync_engine)
        if inline is not None:
            with inline.directly() as sqlite:
                async with _sqlite_transaction(sqlite) as tx:
                    yield tx
            return
    async with engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        if engine.dialect.name == "sqlite":
            async with _sqlite_transaction(raw._conn) as tx:  # the sqlite3 connection inside InlineConnection
                yield tx
        else:
            async with raw.transaction():
                yield _AsyncpgTx(raw)


@contextlib.asynccontextmanager
async def _sqlite_transaction(sqlite: Any) -> AsyncIterator[Tx]:
    # IMMEDIATE takes the write lock up front: another process (an admin's CLI) is waited for
    # at BEGIN, never in the middle of a read-then-write.
    sqlite.execute("BEGIN IMMEDIATE")
    try:
        yield _SqliteTx(sqlite)
        sqlite.commit()
    except BaseException:
        # A failed commit must not leave the connection inside the transaction. The pool may
        # have closed it already (see inline_sqlite.track's guard).
        with contextlib.suppress(sqlite3.ProgrammingError):
            sqlite.rollback()
        raise
