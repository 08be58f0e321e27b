"""Migrate once per test process, copy per test: a fresh database without running Alembic again.

SQLite: the migrated template file is copied to where a test's config puts its database.
PostgreSQL: each database is `CREATE DATABASE ... TEMPLATE` of one migrated per process (one per
xdist worker, so no two workers copy a template at once, which PostgreSQL refuses). The daemon
still runs its migrations at start and finds nothing to do. Tests about the migrations themselves
(tests/test_migrations.py) open empty databases of their own and run the real migrations.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import shutil
import tempfile
import uuid
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

PG_SERVER = "postgres@127.0.0.1:5432"
PG_ADMIN_DSN = f"postgresql://{PG_SERVER}/test"

_sqlite_template: Path | None = None
_pg_template: str | None = None


def _run(coro: Coroutine[Any, Any, None]) -> None:
    """Run `coro` to the end on an event loop of its own (callers may be inside a test's loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, coro).result()


async def _migrate(url: str) -> None:
    from gateway.store.engine import create_engine, migrate

    engine = create_engine(url)
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def copy_migrated_sqlite(path: Path) -> None:
    """Put a migrated SQLite database at `path` (unless one is there already)."""
    global _sqlite_template
    if path.exists():
        return
    if _sqlite_template is None:
        directory = Path(tempfile.mkdtemp(prefix="gw-template-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        _run(_migrate(f"sqlite+aiosqlite:///{directory / 'template.db'}"))
        _sqlite_template = directory / "template.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_sqlite_template, path)


async def create_migrated_pg(admin: Any, name: str) -> None:
    """CREATE DATABASE `name` as a copy of this process's migrated template (made on first use)."""
    global _pg_template
    if _pg_template is None:
        template = f"gw_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        await admin.execute(f'CREATE DATABASE "{template}"')
        atexit.register(_drop_pg, template)
        await _migrate(f"postgresql+asyncpg://{PG_SERVER}/{template}")
        _pg_template = template
    await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{_pg_template}"')


def _drop_pg(name: str) -> None:
    async def drop() -> None:
        import asyncpg

        admin = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()
    try:
        asyncio.run(drop())
    except Exception:  # the server is gone already: nothing left to tidy
        pass
