"""How a restore knows a daemon serves a SQLite file: the daemon holds `<database>.lock`.

Each daemon (and each process of several on one file) holds a *shared* `flock` on the file
beside the database from start to stop; `db restore` asks for it *exclusively*, without waiting,
so it is refused while any daemon is up, and a daemon started during a restore refuses to start.
The kernel drops a lock when its process dies, so a killed daemon leaves none behind (the file
itself stays, empty, and means nothing). PostgreSQL is restored with its own tools
(`gateway.store.backup`), so there is nothing to hold there.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from sqlalchemy.engine import make_url


class DatabaseInUse(Exception):
    """Another process holds the lock in a way that excludes this one (the message says who)."""


def sqlite_file(url: str) -> Path | None:
    """The database file of a SQLite URL; None for PostgreSQL and for an in-memory database."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database or ":memory:"
    return None if database == ":memory:" or database.startswith("file::memory:") else Path(database)


class DaemonLock:
    """The lock on `<database>.lock`: `hold` (a daemon, shared) or `take` (a restore, exclusive)."""

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._fd: int | None = None

    def hold(self) -> None:
        """Shared, for a daemon's life; DatabaseInUse while a restore runs."""
        self._lock(fcntl.LOCK_SH, f"a restore into {self.path.with_suffix('')} is in progress: start once it ended")

    def take(self) -> None:
        """Exclusive, for a restore; DatabaseInUse while a daemon holds the database."""
        self._lock(fcntl.LOCK_EX, f"a daemon is running on {self.path.with_suffix('')}: stop it first "
                                  "(`systemctl stop agent-gateway`), then restore")

    def _lock(self, kind: int, refusal: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DatabaseInUse(refusal) from None
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None
