"""`db backup` and `db restore` of a SQLite database, and what to run for PostgreSQL.

A backup goes through SQLite's online backup API on a connection of its own, in the CLI's own
process: in WAL mode it reads one consistent snapshot (all pages in one step, inside one read
transaction) while the daemon keeps writing, and the daemon's event loop never sees it. The copy
is written beside its target and renamed into place once checked, so a backup file is whole
or absent.

A restore refuses while a daemon holds the database (`daemon_lock`), refuses a backup that is
not a whole gateway database or comes from a newer version, and keeps the database it replaces
(`<database>.before-restore-<time>`): nothing is lost by restoring the wrong file.

PostgreSQL has its own tools, which know its roles, extensions and large objects: the commands
print the `pg_dump` / `pg_restore` line to run (docs/operations.md).
"""

from __future__ import annotations

import contextlib
import shlex
import sqlite3
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.engine import URL, make_url

from gateway.store.daemon_lock import DaemonLock


class BackupError(Exception):
    """The backup or restore cannot be done as asked (the message says why and what to do)."""


@dataclass(frozen=True)
class Copied:
    path: Path
    revision: str | None  # the schema's migration in the copy
    kept: Path | None = None  # a restore: where the database it replaced was kept


def backup(database: Path, target: Path, *, busy_timeout: float = 5.0) -> Copied:
    """Copy the live `database` into `target` (a new file)."""
    if not database.exists():
        raise BackupError(f"{database} does not exist: nothing to back up")
    if target.exists():
        raise BackupError(f"{target} exists: choose a new file name (a backup never overwrites one)")
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    _copy(database, partial, busy_timeout)
    revision = _checked(partial)
    partial.replace(target)
    return Copied(target, revision)


def restore(source: Path, database: Path, known: set[str]) -> Copied:
    """Replace `database` with the backup `source`; `known`: the migrations this version has."""
    if not source.is_file():
        raise BackupError(f"{source} is not a file")
    revision = _checked(source)
    if revision is not None and revision not in known:
        raise BackupError(f"{source} was written by a newer agent-gateway (schema {revision}): restore it with that "
                          "version")
    lock = DaemonLock(database)
    lock.take()  # DatabaseInUse while a daemon runs on it
    try:
        kept = None
        if database.exists():
            stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
            kept = backup(database, database.with_name(f"{database.name}.before-restore-{stamp}")).path
        _copy(source, database, 5.0)
        with contextlib.closing(sqlite3.connect(database)) as db:
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").close()
    finally:
        lock.release()
    return Copied(database, revision, kept)


def _copy(source: Path, target: Path, busy_timeout: float) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.closing(sqlite3.connect(source, timeout=busy_timeout)) as src, \
            contextlib.closing(sqlite3.connect(target, timeout=busy_timeout)) as dst:
        src.backup(dst)  # pages=-1: every page in one step, from one snapshot


def _checked(path: Path) -> str | None:
    """The copy's migration, once SQLite found it whole and it holds a gateway schema."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            (verdict,) = db.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                raise BackupError(f"{path} is damaged ({verdict})")
            try:
                row = db.execute("SELECT version_num FROM alembic_version").fetchone()
            except sqlite3.OperationalError:
                raise BackupError(f"{path} is not an agent-gateway database (it has no schema version)") from None
            return row[0] if row else None
    except sqlite3.DatabaseError as e:
        raise BackupError(f"{path} is not a SQLite database ({e})") from None


def pg_dump_command(url: str, file: str) -> str:
    """The documented backup of a PostgreSQL database: custom format (compressed, restorable
    selectively and in parallel), no owner or privileges (the restoring role owns what it creates)."""
    return f"pg_dump --format=custom --no-owner --no-privileges --file={_quote(file)} {_quote(_libpq(url))}"


def pg_restore_command(url: str, file: str) -> str:
    return (f"pg_restore --clean --if-exists --no-owner --no-privileges --single-transaction "
            f"--dbname={_quote(_libpq(url))} {_quote(file)}")


def _libpq(url: str) -> str:
    """The URL as libpq reads it: no SQLAlchemy driver, no password (give it in ~/.pgpass or PGPASSWORD)."""
    parsed = make_url(url)
    bare = URL.create("postgresql", username=parsed.username, host=parsed.host, port=parsed.port,
                      database=parsed.database, query=parsed.query)
    return bare.render_as_string(hide_password=False)


def _quote(text: str) -> str:
    return shlex.quote(text)
