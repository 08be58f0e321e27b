"""The migrations produce exactly the tables the models describe, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path

import asyncpg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from gateway.store.engine import create_engine, migrate
from gateway.store.fulltext import DATABASE_ONLY
from gateway.store.models import Base


def _ours(name: str | None, type_: str, parent: object) -> bool:
    """Full-text tables and indexes live only in the database (see gateway/store/fulltext.py)."""
    return not (name and name.startswith(DATABASE_ONLY))


async def _diff(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        await migrate(engine)
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync: compare_metadata(MigrationContext.configure(sync, opts={"include_name": _ours}),
                                              Base.metadata)
            )
    finally:
        await engine.dispose()


async def test_sqlite_schema_matches_models(tmp_path: Path) -> None:
    assert await _diff(f"sqlite+aiosqlite:///{tmp_path / 'm.db'}") == []


@pytest.mark.postgres
async def test_postgres_schema_matches_models() -> None:
    name = f"gw_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/test")
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        assert await _diff(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}") == []
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def test_the_head_read_from_the_migration_files_is_alembics() -> None:
    """Start-up skips Alembic when the database records this head (gateway.store.engine.head_revision)."""
    from gateway.store.engine import _scripts, head_revision

    assert head_revision() == _scripts().get_current_head()


async def test_a_database_one_migration_behind_is_brought_to_head(tmp_path: Path) -> None:
    """The fast path that leaves a database at head alone must not leave one behind it."""
    from alembic import command

    from gateway.store.engine import _scripts, alembic_config, head_revision

    previous = _scripts().get_revision(head_revision()).down_revision
    url = f"sqlite+aiosqlite:///{tmp_path / 'behind.db'}"
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), str(previous)))
        assert await _diff(url) == []  # migrate() inside brought it to head
        async with engine.connect() as conn:
            versions = (await conn.exec_driver_sql("SELECT version_num FROM alembic_version")).scalars().all()
        assert versions == [head_revision()]
    finally:
        await engine.dispose()
