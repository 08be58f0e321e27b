"""SQLite for SQLAlchemy's async engine, run inline on the event loop instead of in a thread.

aiosqlite hands every call to a thread of its own; a statement costs two thread switches, and a
short transaction about 1.5 ms on an idle machine (far more on a busy one), while SQLite itself
answers in tens of microseconds. The gateway's transactions are a few statements on a local
file, so running them on the loop is much cheaper than handing them off.

This is safe only because the engine uses ONE connection (see `engine.create_engine`): every
transaction waits for that connection in asyncio, never inside SQLite's busy handler, so the
loop can never block on a lock that another of its own transactions holds.

The objects below provide the slice of aiosqlite's interface that SQLAlchemy's aiosqlite
dialect uses (`sqlalchemy/dialects/sqlite/aiosqlite.py`, `connectors/asyncio.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import event
from sqlalchemy.engine import Engine


class InlineCursor:
    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        self._cursor.execute(sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        self._cursor.executemany(sql, parameters)
        return self

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(size or self._cursor.arraysize)

    async def close(self) -> None:
        self._cursor.close()

    async def setinputsizes(self, *sizes: Any) -> None:
        return None


class _Immediate:
    """Stands in for aiosqlite's request queue: SQLAlchemy puts (future, function) pairs on it."""

    def put_nowait(self, item: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = item
        try:
            future.set_result(function())
        except Exception as e:
            future.set_exception(e)


class InlineConnection:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._connection = conn  # aiosqlite's "is it open" attribute
        self._tx = _Immediate()
        self.direct = False  # in a transaction of driver.transaction's, outside the pool

    @contextlib.contextmanager
    def directly(self) -> Iterator[sqlite3.Connection]:
        self.direct = True
        try:
            yield self._conn
        finally:
            self.direct = False

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._conn.cursor())

    async def commit(self) -> None:
        self._conn.commit()

    async def rollback(self) -> None:
        self._conn.rollback()

    async def close(self) -> None:
        if self._connection is not None:
            self._conn.close()
            self._connection = None

    def stop(self) -> None:
        if self._connection is not None:
            self._conn.close()
            self._connection = None

    async def create_function(self, *args: Any, **kw: Any) -> None:
        self._conn.create_function(*args, **kw)


async def connect(database: str, **kw: Any) -> InlineConnection:
    # Nothing of ours can hold a lock against the one connection. Another process (an admin's
    # CLI) can, for the milliseconds its transaction takes: the busy timeout set with the other
    # pragmas (engine._sqlite_pragmas) waits for it, on the loop.
    kw["check_same_thread"] = False
    return InlineConnection(sqlite3.connect(database, **kw))


# Each engine's one connection, so driver.transaction can use it while the pool holds it idle:
# a pool checkout costs more than a whole short transaction on SQLite.
_connections: WeakKeyDictionary[Engine, InlineConnection] = WeakKeyDictionary()


def track(engine: Engine) -> None:
    """Remember the connection the pool makes; refuse a checkout while it is used directly.

    A direct transaction never awaits anything that suspends, so nothing else on the loop can
    want the connection meanwhile. If a change ever awaits inside one, the ORM's checkout fails
    loudly here instead of running its statements inside that transaction.
    """

    def remember(dbapi_connection: Any, _record: object) -> None:
        _connections[engine] = dbapi_connection._connection  # the adapter wraps an InlineConnection

    def guard(_dbapi_connection: object, _record: object, _proxy: object) -> None:
        inline = _connections.get(engine)
        if inline is not None and inline.direct:
            raise RuntimeError("SQLite's connection is in a direct transaction that awaited something")

    event.listen(engine, "connect", remember)
    event.listen(engine, "checkout", guard)


def idle_connection(engine: Engine) -> InlineConnection | None:
    """The engine's connection if it is open and nobody holds it, else None (use the pool)."""
    inline = _connections.get(engine)
    if inline is None or inline._connection is None or inline.direct or engine.pool.checkedout():
        return None
    return inline
