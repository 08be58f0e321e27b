"""Transactions on the database driver itself, for the statements every message runs.

A message costs a few short transactions: ingest, claim, the reply's delivery rows, the run's
end. Through SQLAlchemy's async ORM each statement costs about 0.3 ms of Python and each
transaction another 0.1 ms; the driver answers the same statement in tens of microseconds. So
`Store`'s per-message methods write plain, portable SQL here, once, with `:name` parameters;
everything else in the store uses the ORM.

Such a transaction is a *program*: a generator that yields statements (`q.one(...)`,
`q.all(...)`, `q.run(...)`) and receives each one's result, returning its own result at the end:

    def count(q: Statements, c: str) -> Program[int]:
        row = yield q.one("SELECT count(*) FROM messages WHERE conversation_id = :c", c=c)
        return row[0]

On SQLite the whole program runs in one call: on the loop when SQLite can give the write lock
at once and the connection's thread has nothing of ours, else in that thread (see `sqlite`):
the loop never waits on SQLite, and a transaction costs at most one thread round trip, not one
per statement. On PostgreSQL each statement is awaited on a raw asyncpg connection from the pool.
A program therefore never awaits anything: it cannot, which is what makes the one-call form
safe (nothing can run inside someone else's transaction).

Either way a database that does not answer within the bound raises `StoreUnavailable`, and any other
error of the database driver is raised as SQLAlchemy raises it (`sqlalchemy.exc.OperationalError` for
sqlite3's, ...): a caller catches the store's failures one way, whichever path ran the statement.

A program that only reads goes through `read`: no write lock (SQLite) and no transaction at all,
each statement seeing the database as of its own start, as PostgreSQL's READ COMMITTED does. So
it answers while another process holds SQLite's write lock (WAL: readers never wait for the
writer), where `transaction`'s BEGIN IMMEDIATE would wait for it up to the bound.
"""

from __future__ import annotations

import contextlib
import re
import sqlite3
import time
from collections.abc import Callable, Generator
from datetime import datetime, timezone
from functools import partial
from typing import Any, NamedTuple, TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import sqlite
from gateway.store.storable import UNSTORABLE, storable
from gateway.store.availability import Guard, StoreUnavailable, guard, is_lock_wait, is_transient

Row = tuple[Any, ...]
T = TypeVar("T")


class Stmt(NamedTuple):
    kind: str  # "all": every row, "one": the first row or None, "run": the number of rows changed
    sql: str
    params: dict[str, Any]


Program = Generator[Stmt, Any, T]


def _storable(params: dict[str, Any]) -> dict[str, Any]:
    """A statement's own keyword dict, its text made storable in place (no copy, no call per value)."""
    for k, v in params.items():
        if isinstance(v, str) and UNSTORABLE.search(v):
            params[k] = storable(v)
    return params


class Statements:
    """What a program yields, and how it reads a timestamp back. Datetimes go in aware and come
    out aware (UTC). A statement's parameters are its own dict, made ready for the engine in place
    as it is bound (`_sqlite_bind`, `_storable`): one pass over them."""

    @staticmethod
    def all(sql: str, **params: Any) -> Stmt:
        return Stmt("all", sql, params)

    @staticmethod
    def one(sql: str, **params: Any) -> Stmt:
        return Stmt("one", sql, params)

    @staticmethod
    def run(sql: str, **params: Any) -> Stmt:
        return Stmt("run", sql, params)

    def time(self, value: Any) -> datetime | None:
        return value  # type: ignore[no-any-return]


# SQLAlchemy's SQLite DATETIME text ("%Y-%m-%d %H:%M:%S.%f"), so rows written here and by the ORM
# compare and sort alike.


class _SqliteStatements(Statements):
    def time(self, value: Any) -> datetime | None:
        if value is None:
            return None
        return datetime.fromisoformat(value).replace(tzinfo=timezone.utc)


_SQLITE = _SqliteStatements()
_POSTGRES = Statements()


_last_time: tuple[datetime | None, str] = (None, "")  # a transaction's `now` is bound to several statements


def _sqlite_bind(params: dict[str, Any]) -> dict[str, Any]:
    """A statement's parameters for sqlite3, in place and in one pass (no call per value): text made
    storable; a datetime as SQLAlchemy's SQLite DATETIME text, by isoformat (two thirds of
    strftime's CPU), the last one kept."""
    global _last_time
    for k, v in params.items():
        if isinstance(v, str):
            if UNSTORABLE.search(v):
                params[k] = storable(v)
        elif isinstance(v, datetime):
            last, text = _last_time
            if v is not last:
                text = v.astimezone(timezone.utc).replace(tzinfo=None).isoformat(" ", "microseconds")
                _last_time = (v, text)
            params[k] = text
    return params


def _run_on_sqlite(program: Callable[[Statements], Program[T]], conn: sqlite3.Connection, write: bool = True) -> T:
    """The whole transaction, in the connection's thread; a read (`write=False`) outside any:
    sqlite3 begins none for a SELECT."""
    # IMMEDIATE takes the write lock up front: another process is waited for at BEGIN (in the
    # busy handler, up to the bound), never in the middle of a read-then-write.
    if write:
        conn.execute("BEGIN IMMEDIATE")
    try:
        steps = program(_SQLITE)
        try:
            stmt = next(steps)
            while True:
                cursor = conn.execute(stmt.sql, _sqlite_bind(stmt.params))
                if stmt.kind == "all":
                    result: Any = cursor.fetchall()
                elif stmt.kind == "one":
                    result = cursor.fetchone()
                else:
                    result = cursor.rowcount
                cursor.close()
                stmt = steps.send(result)
        except StopIteration as done:
            value: T = done.value
        if write:
            conn.commit()
        return value
    except BaseException:
        # A failed commit must not leave the connection inside the transaction.
        with contextlib.suppress(sqlite3.ProgrammingError, sqlite3.OperationalError):
            conn.rollback()
        raise


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


async def _run_on_asyncpg(program: Callable[[Statements], Program[T]], raw: Any, write: bool = True) -> T:
    if not write:  # each statement on its own: a transaction would add two round trips, no snapshot
        return await _steps_on_asyncpg(program, raw)
    async with raw.transaction():
        return await _steps_on_asyncpg(program, raw)


async def _steps_on_asyncpg(program: Callable[[Statements], Program[T]], raw: Any) -> T:
    tx = _AsyncpgTx(raw)
    steps = program(_POSTGRES)
    try:
        stmt = next(steps)
        while True:
            result = await getattr(tx, stmt.kind)(stmt.sql, **_storable(stmt.params))
            stmt = steps.send(result)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


async def transaction(engine: AsyncEngine, program: Callable[[Statements], Program[T]], *, write: bool = True) -> T:
    """Run a program as one write transaction: committed when it returns, rolled back if it
    raises (its exception propagates). StoreUnavailable if the database does not answer in time."""
    limits = guard(engine)
    waiting = limits.waits.begin()  # not `waits.waiting()`: a context manager's calls, every transaction
    try:
        result = await _transaction(engine, program, limits, write)
    except StoreUnavailable as e:
        limits.outages.failed(e)
        raise
    except Exception as e:
        if not _from_the_driver(e):
            raise  # the program's own (a Duplicate, a refusal): it means what it says
        raise DBAPIError.instance(None, None, e, Exception, hide_parameters=True, dialect=engine.dialect) from e
    finally:
        limits.waits.end(waiting)
    limits.outages.answered()
    return result


def _from_the_driver(error: BaseException) -> bool:
    """An error sqlite3 or asyncpg raised (not a program's own, not SQLAlchemy's already)."""
    return isinstance(error, sqlite3.Error) or type(error).__module__.startswith("asyncpg")


async def read(engine: AsyncEngine, program: Callable[[Statements], Program[T]]) -> T:
    """Run a program of SELECTs without a write lock or a transaction (see the module's doc): the
    same paths, bound and /readyz accounting as `transaction`. A program that writes must not."""
    return await transaction(engine, program, write=False)


async def _transaction(engine: AsyncEngine, program: Callable[[Statements], Program[T]], limits: Guard,
                       write: bool = True) -> T:
    bound = limits.bound
    if engine.dialect.name == "sqlite":
        function = partial(_run_on_sqlite, program, write=write)
        started = time.monotonic()
        deadline = started + bound
        while True:
            conn = sqlite.idle_connection(engine.sync_engine)
            if conn is None:
                if not sqlite.held(engine.sync_engine):
                    break  # not connected yet: the pool opens the connection
                await sqlite.given_back(engine.sync_engine, started + max(bound, limits.queue_wait))
                continue
            if sqlite.behind_the_thread(conn):
                await sqlite.thread_idle(conn, deadline, bound)
                # Checked again: a session may have taken the connection meanwhile.
                if sqlite.idle_connection(engine.sync_engine) is not conn:
                    continue
            try:  # on the loop, never waiting there
                return sqlite.inline(conn, function, bound, write)
            except sqlite.Busy:
                pass
            return await sqlite.run(conn, function, bound, deadline, write)
        async with engine.connect() as c:
            raw = (await c.get_raw_connection()).driver_connection
            return await sqlite.run(raw, function, bound, write=write)
    try:
        async with engine.connect() as c:
            raw = (await c.get_raw_connection()).driver_connection
            return await _run_on_asyncpg(program, raw, write)
    except StoreUnavailable:
        raise
    except Exception as e:
        if is_transient(e):
            raise StoreUnavailable(f"the database did not answer in time ({e})", bound,
                                   unreachable=not is_lock_wait(e)) from e
        raise
