"""When the database cannot answer in time: one exception, what counts as it, and how long we wait.

    StoreUnavailable(retry_after)        the store gave up within its bound; nothing was written
      raised for:
      - SQLite: the write lock is held by another process (an admin command, a `sqlite3` shell,
        a backup) for longer than `database.busy_timeout_seconds` (SQLITE_BUSY / SQLITE_LOCKED);
      - PostgreSQL: a lock wait past `lock_timeout`, a statement cancelled by the server, a
        connection refused, lost or not handed out by the pool in time;
      - either: every connection busy for longer than the bound (the pool's checkout timeout).

It is raised where the store meets its driver (`driver` for the per-message transactions,
`engine` for everything that goes through SQLAlchemy) and turned into an answer in one place
per surface: 503 with `Retry-After` on HTTP (`gateway.http.server`), no acknowledgement on a platform
(the adapter's `submit` raises, so the platform redelivers), a later retry for work already
accepted (`conversations.Scheduler`, `Store.patiently`).

`Waits` keeps what is waiting on the database right now, for `/readyz`: a write that has waited
longer than a moment is what "degraded" means. `Outages` keeps what happened meanwhile: since
when it has not answered, the last error, when it answered again.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from weakref import WeakKeyDictionary

# SQLite result codes (the low byte of an extended code): another connection holds a lock.
SQLITE_BUSY, SQLITE_LOCKED = 5, 6
# PostgreSQL SQLSTATEs that mean "try again later", not "your statement is wrong":
# lock_not_available (lock_timeout), query_canceled (statement_timeout), cannot_connect_now,
# too_many_connections, admin/crash shutdown, and class 08 (connection exceptions); and a transaction the
# server rolled back to break a deadlock or a serialization conflict (deadlock_detected, serialization_failure):
# it wrote nothing and goes through when tried again. Not retried, a claim that lost a deadlock read as one that
# fails every time, and its run ended failed, its messages set aside (`Scheduler._unclaimable`).
_PG_RETRYABLE = frozenset({"55P03", "57014", "57P03", "53300", "57P01", "57P02", "40P01", "40001"})
DEGRADED_AFTER = 0.25  # seconds a write may wait before /readyz calls the database degraded


class StoreUnavailable(Exception):
    """The database did not answer within the configured bound; try again after `retry_after` s.
    Whoever catches it knows nothing was stored: a platform is not acked (it delivers again), a
    poller stays on the update, an HTTP client gets 503 + Retry-After."""

    what = "the database is busy"  # for log lines and the 503's message

    def __init__(self, message: str, retry_after: float, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.unreachable = unreachable  # no answer at all (vs. an answer that is "locked, wait")

    @property
    def retry_after_header(self) -> str:
        """Whole seconds, at least 1, as HTTP's Retry-After wants them."""
        return str(max(1, math.ceil(self.retry_after)))


class NotAccepting(StoreUnavailable):
    """The gateway is starting or stopping and takes no message now. The same contract as a busy
    database (nothing stored, delivered again later), so every adapter's existing retry path
    serves it; acking and dropping it instead would lose a message sent in a restart's window."""

    what = "the gateway is starting or stopping"

    def __init__(self) -> None:
        super().__init__("not accepting messages yet", retry_after=1.0)


def is_sqlite_busy(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and (
        getattr(error, "sqlite_errorcode", 0) & 0xFF in (SQLITE_BUSY, SQLITE_LOCKED)
        or "locked" in str(error)  # a driver that does not carry the code
    )


def is_lock_wait(error: BaseException) -> bool:
    """A wait for a lock past its timeout (the database answered), not a missing connection."""
    current: BaseException | None = error
    for _ in range(8):
        if current is None:
            break
        state = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if is_sqlite_busy(current) or state in ("55P03", "57014", "40P01"):
            return True
        current = current.__cause__ or current.__context__
    return False


def is_transient(error: BaseException) -> bool:
    """Whether a driver's exception (or one it wraps) means the database is busy or unreachable."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if is_sqlite_busy(current) or isinstance(current, (ConnectionError, TimeoutError)):
            return True
        if isinstance(current, OSError) and not isinstance(current, FileNotFoundError):
            return True
        state = getattr(current, "sqlstate", None) or getattr(current, "pgcode", None)
        if isinstance(state, str) and (state in _PG_RETRYABLE or state.startswith("08")):
            return True
        if state == "55000" and "not currently accepting connections" in str(current):
            return True  # the database closed to connections for a while (maintenance, a restore)
        if type(current).__module__.startswith("asyncpg") and type(current).__name__ in (
            "ConnectionDoesNotExistError", "InterfaceError", "InternalClientError",
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


class Waits:
    """What is waiting on the database now: each entry's start, for the oldest's age."""

    def __init__(self) -> None:
        self._started: dict[int, float] = {}
        self._ids = itertools.count()

    def begin(self) -> int:
        token = next(self._ids)
        self._started[token] = time.monotonic()
        return token

    def end(self, token: int) -> None:
        self._started.pop(token, None)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        token = self.begin()
        try:
            yield
        finally:
            self.end(token)

    def longest(self) -> float:
        """Seconds the oldest wait has lasted so far (0 when nothing waits)."""
        if not self._started:
            return 0.0
        return max(0.0, time.monotonic() - min(self._started.values()))

    def state(self) -> dict[str, Any]:
        longest = self.longest()
        if longest >= DEGRADED_AFTER:
            return {"status": "degraded", "waiting_seconds": round(longest, 2), "waiting": len(self._started)}
        return {"status": "ok"}


class Outages:
    """What happened to the database lately, for /readyz: since when it has not answered (while it
    does not), the last error and when, and when it answered again. Kept in memory: an operator
    reading /readyz after a lock or a restart of the database sees that it happened and when it
    ended, not only how things stand this second."""

    def __init__(self) -> None:
        self.since: datetime | None = None  # the first failure of the outage in progress
        self.last_error: str = ""
        self.last_error_at: datetime | None = None
        self.recovered_at: datetime | None = None
        self.count = 0  # outages since start
        # The last failure got no answer at all (refused, lost, timed out connecting), as against
        # "locked, wait": while that lasts the database is down, whatever is waiting on it.
        self.unreachable = False

    def failed(self, error: BaseException) -> None:
        now = datetime.now(timezone.utc)
        if self.since is None:
            self.since = now
            self.count += 1
        self.last_error, self.last_error_at = str(error)[:200], now
        self.unreachable = getattr(error, "unreachable", True)

    def down(self) -> dict[str, Any] | None:
        """/readyz's "down" while the database has not answered since an unreachable failure."""
        if self.since is None or not self.unreachable:
            return None
        return {"status": "down", "error": self.last_error}

    def answered(self) -> None:
        """The database answered: an outage in progress is over. Cheap when there is none."""
        if self.since is not None:
            self.since, self.recovered_at = None, datetime.now(timezone.utc)

    def state(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.since is not None:
            out["unavailable_since"] = self.since.isoformat()
        if self.last_error_at is not None:
            out.update(last_error=self.last_error, last_error_at=self.last_error_at.isoformat(), outages=self.count)
        if self.recovered_at is not None:
            out["recovered_at"] = self.recovered_at.isoformat()
        return out


@dataclass
class Guard:
    """One engine's bound (seconds a statement may wait for a lock or a connection), its waits
    and its outages."""

    bound: float = 5.0
    queue_wait: float = 60.0  # SQLite: seconds a transaction may queue behind our own work (`sqlite.QUEUE_WAIT`)
    waits: Waits = field(default_factory=Waits)
    outages: Outages = field(default_factory=Outages)


_guards: WeakKeyDictionary[Any, Guard] = WeakKeyDictionary()


def guard(engine: Any) -> Guard:
    """The engine's Guard (an AsyncEngine and its sync engine share one)."""
    key = getattr(engine, "sync_engine", engine)
    found = _guards.get(key)
    if found is None:
        found = _guards[key] = Guard()
    return found
