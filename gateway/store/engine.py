"""Engine creation, SQLite pragmas, and migrations run at start-up."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING
from collections.abc import AsyncIterator
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import AsyncAdaptedQueuePool

from . import inline_sqlite

if TYPE_CHECKING:
    from .repo import Store

MIGRATIONS = Path(__file__).parent / "migrations"


def create_engine(url: str) -> AsyncEngine:
    """An async engine; for SQLite the file's directory is created and WAL is switched on."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ":memory:"
        if database != ":memory:":
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        # One connection, used inline on the event loop (see inline_sqlite): transactions queue
        # for it in asyncio. A store method must not open a second session while its first
        # still holds the connection; pool_timeout turns such a mistake into an error.
        engine = create_async_engine(
            url,
            async_creator=lambda: inline_sqlite.connect(database),
            poolclass=AsyncAdaptedQueuePool,
            pool_size=1,
            max_overflow=0,
            pool_timeout=10,
        )
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        inline_sqlite.track(engine.sync_engine)
        return engine
    return create_async_engine(url, pool_size=10, max_overflow=10, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    # Only another process (an admin's CLI) can hold a lock against us; wait briefly for it.
    cursor.execute("PRAGMA busy_timeout=2000")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def alembic_config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


async def migrate(engine: AsyncEngine) -> None:
    """Bring the schema to head. Safe to run from several replicas: PostgreSQL serializes it."""

    def upgrade(connection: Connection) -> None:
        if connection.dialect.name == "postgresql":
            # One replica migrates at a time; the others wait, then find nothing to do.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7263510)")
        command.upgrade(alembic_config(connection), "head")

    async with engine.begin() as conn:
        await conn.run_sync(upgrade)


@contextlib.asynccontextmanager
async def open_store(url: str) -> AsyncIterator["Store"]:
    """A migrated store for the CLI's one-off reads and writes."""
    from .repo import Store

    engine = create_engine(url)
    try:
        await migrate(engine)
        yield Store(engine)
    finally:
        await engine.dispose()
