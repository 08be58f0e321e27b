"""SQLite off the event loop: aiosqlite's one thread per connection, one connection per engine.

SQLite calls block: a statement that meets another process's write lock (an admin command, a
`sqlite3` shell, a backup) sleeps in SQLite's busy handler for up to `busy_timeout`. So every
call runs in the connection's own thread (aiosqlite), and the loop only awaits a future.

Why aiosqlite and not a writer thread of our own: aiosqlite already is one dedicated thread with
a queue per connection, and SQLAlchemy's async SQLite dialect speaks it. What it costs is one
thread round trip per call (about 70 us here, more when the loop idles), and SQLAlchemy's
aiosqlite adapter makes a call per statement. That is fine for the ORM's occasional queries,
not for the few transactions every message runs (ingest, claim, delivery rows, the run's end:
7 round trips for ingest alone). Those (`driver.transaction`) hand their whole transaction to
the thread as ONE call (`run`): a short transaction measured 0.61 ms per-statement vs 0.22 ms
in one call vs 0.13 ms inline on the loop (5 inserts, 2 CPUs). One call is still a little
dearer than the old inline connection, and nothing can freeze the loop any more.

`run` hands the call to aiosqlite's queue through `Connection._execute`, which is private (as
is the `_tx` queue SQLAlchemy's own aiosqlite adapter uses); every store test goes through it.

A transaction is first tried on the loop itself (`inline`) when the connection's thread has
nothing queued, with SQLite's busy timeout at 0: an immediate write lock, or an immediate
SQLITE_BUSY when another process holds it, never a wait. Only then is it handed to the thread,
with the bound. Inline it costs the statements alone: no thread round trip, no cross-thread wake
of the loop, no contention for the GIL with the thread (bench/platforms.py's bursts: 1-4 ms of
the daemon's CPU per message less, for the 4 transactions a message runs). The loop still never waits for another
process. Nor for the disk's syncs: an inline commit never checkpoints (the WAL's auto-checkpoint
is off for it; `synchronous=NORMAL` syncs at a checkpoint, and the first commit after one syncs the
WAL's header as it starts the log again), and every CHECKPOINT_EVERY-th transaction goes to the
thread, which checkpoints before it: that transaction's commit then pays the header's sync there.

Those two settings (`busy_timeout`, `wal_autocheckpoint`) are set when the connection's next use
needs other values than it has (`_Thread.settle`), not set and reset around every transaction (4
PRAGMAs of a plain message's ~25 statements, twice a message): an inline transaction needs (0, 0);
one in the thread the bound, the auto-checkpoint as it is (it is counted towards the next
checkpoint, as an inline one is); a session the bound and SQLite's own auto-checkpoint, set at its
checkout (`track`), since nothing here counts its writes.

One connection: our own transactions queue for it in asyncio (behind a session that holds it,
`given_back`, or in the thread's queue) rather than in SQLite's busy handler, which polls with sleeps and would make them wait for each
other in milliseconds. Only another process is ever waited for inside SQLite, and only up to
the bound (`database.busy_timeout_seconds`); past it `StoreUnavailable` is raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from sqlalchemy import event
from sqlalchemy.engine import Engine

from gateway.store.availability import StoreUnavailable, is_sqlite_busy

T = TypeVar("T")


QUEUE_WAIT = 60.0  # seconds a transaction may queue behind our own work for the one connection
RETRY_AFTER_QUEUE = 2.0  # what a client is told to wait after a queue wait ran out (not the wait itself)
AUTOCHECKPOINT = 1000  # pages: SQLite's default, kept for everything but an inline transaction
# Inline transactions between checkpoints on the thread: a burst's are ~15 WAL frames each (a run's end
# carries the next run's claim), so the WAL stays under SQLite's own 1,000. A checkpoint costs the thread
# ~1.9 ms (its syncs) and ~17 us a transaction it copies: fewer would need a larger WAL (bench/README.md,
# Round 15 "the store under a burst").
CHECKPOINT_EVERY = 50


def pragmas(busy_timeout: float) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_connection: Any, _record: object) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        # Only another process can hold a lock against our one connection: wait for it, in
        # the connection's thread, up to the bound.
        cursor.execute(f"PRAGMA busy_timeout={_ms(busy_timeout)}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT}")
        cursor.close()
        state = _thread(dbapi_connection.driver_connection)
        state.busy, state.pages = _ms(busy_timeout), AUTOCHECKPOINT

    return on_connect


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


# Each engine's one aiosqlite connection, so driver.transaction can hand it a whole transaction
# while the pool holds it idle (a checkout costs more than the transaction).
_connections: WeakKeyDictionary[Engine, Any] = WeakKeyDictionary()


# Transactions waiting for a session to give the engine's connection back (`given_back`).
_waiting: WeakKeyDictionary[Engine, list[asyncio.Future[None]]] = WeakKeyDictionary()


def track(engine: Engine, busy_timeout: float) -> None:
    def remember(dbapi_connection: Any, _record: object) -> None:
        _connections[engine] = dbapi_connection.driver_connection  # the aiosqlite.Connection

    def for_a_session(dbapi_connection: Any, _record: object, _proxy: object) -> None:
        # What inline transactions left (no busy timeout, no auto-checkpoint) is set back through the
        # session's own adapter: in the thread, ahead of the session's statements. A thread
        # transaction handed over meanwhile only ever sets the bound, which a session needs too.
        state = _thread(dbapi_connection.driver_connection)
        if (state.busy, state.pages) != (_ms(busy_timeout), AUTOCHECKPOINT):
            cursor = dbapi_connection.cursor()
            state.settle(cursor.execute, _ms(busy_timeout), AUTOCHECKPOINT)
            cursor.close()

    def returned(_dbapi_connection: Any, _record: object) -> None:
        try:
            here = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for waiter in _waiting.pop(engine, []):
            if waiter.done():  # its wait timed out
                continue
            if waiter.get_loop() is here:
                # At once, not a loop pass later: the pool wakes a session queued for the connection
                # after this, and a transaction woken later than it would find the connection taken
                # again, every time, while sessions keep queueing.
                _wake(waiter)
                continue
            # From another thread (a garbage collector's finalizer giving the connection back).
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits any more
                waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    event.listen(engine, "connect", remember)
    event.listen(engine, "checkout", for_a_session)
    event.listen(engine, "checkin", returned)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def idle_connection(engine: Engine) -> Any | None:
    """The engine's aiosqlite connection if it is open and no session holds it, else None.

    Safe without a lock: a session that checks it out after this returns queues its calls in
    the same thread behind the transaction handed over, which runs as one call.
    """
    conn = _open(engine)
    return conn if conn is not None and not engine.pool.checkedout() else None


def held(engine: Engine) -> bool:
    """Whether a session holds the engine's (open) connection now."""
    return _open(engine) is not None and bool(engine.pool.checkedout())


def _open(engine: Engine) -> Any | None:
    conn = _connections.get(engine)
    if conn is None or not getattr(conn, "_running", False) or conn._connection is None:
        return None
    return conn


async def given_back(engine: Engine, deadline: float) -> None:
    """Wait, on the loop, until a session gives the engine's connection back to the pool.

    A transaction then takes the idle path (`inline`, or the thread as one call) rather than
    queueing in the pool: one queued there checks the connection out in its turn, so every
    transaction arriving meanwhile queued behind it, and under a burst the store stayed in that
    mode, each transaction paying a checkout and a thread round trip (bench/platforms.py's Slack
    bursts: 11 ms of the daemon's CPU per message in the one mode, 17-22 ms in the other).
    Waiting behind our own work: bounded by QUEUE_WAIT (`engine.create_engine`), not busy_timeout.
    """
    waiter = asyncio.get_running_loop().create_future()
    _waiting.setdefault(engine, []).append(waiter)
    await _until(deadline, waiter, "no database connection free in time (a session held it)", RETRY_AFTER_QUEUE)


async def _until(deadline: float, wait: Awaitable[Any], refusal: str, retry_after: float) -> None:
    """`wait`, but StoreUnavailable(`refusal`) at `deadline` (a wait behind our own work)."""
    try:
        async with asyncio.timeout(deadline - time.monotonic()):
            await wait
    except TimeoutError:
        raise StoreUnavailable(refusal, retry_after) from None


class _Thread:
    """What the driver knows about a connection's thread: calls of ours in it (`idle` is set when
    there are none), transactions since its last checkpoint, and the connection's busy timeout (ms)
    and auto-checkpoint (pages) as last set (None: not known)."""

    __slots__ = ("busy", "calls", "idle", "pages", "since_checkpoint")

    def __init__(self) -> None:
        self.calls = 0
        self.idle = asyncio.Event()
        self.idle.set()
        self.since_checkpoint = 0
        self.busy: int | None = None
        self.pages: int | None = None

    def settle(self, execute: Callable[[str], object], busy: int, pages: int | None = None) -> None:
        """Give the connection `busy` ms of busy timeout and `pages` of auto-checkpoint (None: as it
        is), by the PRAGMAs that change something."""
        if busy != self.busy:
            execute(f"PRAGMA busy_timeout={busy}")
            self.busy = busy
        if pages is not None and pages != self.pages:
            execute(f"PRAGMA wal_autocheckpoint={pages}")
            self.pages = pages

    def finished(self, call: asyncio.Future[Any]) -> None:
        self.calls -= 1
        if not self.calls:
            self.idle.set()
        if not call.cancelled():
            call.exception()  # retrieved: a caller that was cancelled no longer wants it


_threads: WeakKeyDictionary[Any, _Thread] = WeakKeyDictionary()


def _thread(conn: Any) -> _Thread:
    state = _threads.get(conn)
    if state is None:
        state = _threads[conn] = _Thread()
    return state


class Busy(Exception):
    """Not now on the loop: the thread has work of ours, another process holds the write lock, or
    a checkpoint is due (the thread takes the transaction, `run`)."""


def behind_the_thread(conn: Any) -> bool:
    """Whether a transaction waits for the thread's work of ours before it runs (`thread_idle`);
    not when a checkpoint is due (the thread takes that one anyway)."""
    state = _thread(conn)
    return bool(state.calls) and state.since_checkpoint < CHECKPOINT_EVERY


async def thread_idle(conn: Any, deadline: float, bound: float) -> None:
    """Wait, on the loop, until the thread has none of our work: a transaction then runs inline,
    instead of queueing in the thread behind it (under a burst every transaction would, and
    the thread would never be idle again). Returns at once when a checkpoint is due."""
    while behind_the_thread(conn):
        await _until(deadline, _thread(conn).idle.wait(),
                     "the database is busy (waited for earlier work past the bound)", bound)


def inline(conn: Any, function: Callable[[Any], T], bound: float, write: bool = True) -> T:
    """Call `function(sqlite3_connection)` on the loop, never waiting: Busy if another process holds
    the lock, if the thread has work of ours (it would run inside or beside it), or when a
    checkpoint is due. A read (`write=False`) adds nothing to the WAL: it is not counted towards
    the checkpoint and does not wait for one."""
    state = _thread(conn)
    sqlite = conn._conn
    # In a transaction: someone else's, still open in the thread (a session's, say, whose caller
    # was cancelled): never run inside it.
    if state.calls or (write and state.since_checkpoint >= CHECKPOINT_EVERY) or sqlite.in_transaction:
        raise Busy
    state.settle(sqlite.execute, 0, 0)  # left so: whatever uses the connection next sets what it needs
    try:
        result = function(sqlite)
    except Exception as e:
        if is_sqlite_busy(e):
            raise Busy from e
        raise
    if write:
        state.since_checkpoint += 1
    return result


async def run(conn: Any, function: Callable[[Any], T], bound: float, deadline: float | None = None,
              write: bool = True) -> T:
    """Call `function(sqlite3_connection)` in the connection's thread; past `bound` seconds of
    waiting (for the thread's queue, then for another process's lock) raise StoreUnavailable.
    Then a passive checkpoint of what inline transactions left in the WAL, if they left much;
    never before a read (`write=False`): the next writer would restart the log, on the loop."""
    deadline = deadline or time.monotonic() + bound
    state = _thread(conn)
    checkpoint = write and state.since_checkpoint >= CHECKPOINT_EVERY
    if checkpoint:
        state.since_checkpoint = 0
    # Counted as an inline one is: after inline work it runs with no auto-checkpoint too.
    if write:
        state.since_checkpoint += 1

    def call() -> T:
        sqlite = conn._conn
        left = deadline - time.monotonic()
        if left <= 0:
            raise StoreUnavailable("the database is busy (waited for earlier work past the bound)", bound)
        # What is left of the bound, if queueing took a noticeable part of it; the bound again after.
        short = bound - left > 0.01
        if checkpoint:
            # Passive: it copies what no reader needs and waits for no one. Before the program, so
            # that the program's commit restarts the log and pays its sync here, in the thread
            # (after a checkpoint the next writer syncs the WAL header: that must not be on the loop).
            with contextlib.suppress(sqlite3.Error):
                sqlite.execute("PRAGMA wal_checkpoint(PASSIVE)").close()
        state.settle(sqlite.execute, _ms(left) if short else _ms(bound))
        try:
            result = function(sqlite)
        except Exception as e:
            if is_sqlite_busy(e):
                raise StoreUnavailable(f"the database is locked by another process ({e})", bound) from e
            raise
        finally:
            if short:
                state.settle(sqlite.execute, _ms(bound))
        return result

    # Counted until the thread has finished the call, not until this caller stops waiting: a
    # caller cancelled meanwhile must not let an inline transaction run beside it.
    state.calls += 1
    state.idle.clear()
    done = asyncio.ensure_future(conn._execute(call))
    done.add_done_callback(state.finished)
    return await asyncio.shield(done)  # type: ignore[no-any-return]
