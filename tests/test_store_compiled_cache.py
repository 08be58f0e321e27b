"""Statements compiled once per process, not once per engine (gateway/store/compiled_cache.py): every
in-process gateway start (a test's, a restart inside one) makes an engine of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import contextlib

from sqlalchemy import event, select
from sqlalchemy.engine import Engine
from sqlalchemy.engine.default import CACHE_MISS

from gateway.store.engine import create_engine
from gateway.store.models import Run

from .conftest import running_gateway, write_config
from .support.template_db import copy_migrated_sqlite


@contextlib.contextmanager
def statements() -> Iterator[tuple[list[str], list[str]]]:
    """The SQL of every compiled statement any engine of the process ran meanwhile, and of those it
    compiled anew (a cache miss)."""
    ran: list[str] = []
    missed: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, _params: Any, context: Any, _many: bool) -> None:
        if getattr(context, "compiled", None) is not None:
            ran.append(statement)
            if getattr(context, "cache_hit", None) is CACHE_MISS:
                missed.append(statement)

    event.listen(Engine, "after_cursor_execute", seen)
    try:
        yield ran, missed
    finally:
        event.remove(Engine, "after_cursor_execute", seen)


async def test_a_second_gateway_in_the_process_compiles_none_of_the_statements_its_start_shares_with_the_first(
        tmp_path: Path) -> None:
    """The start-up's queries (sweeps, parked approvals, schedules due) were compiled again by every engine."""
    with statements() as (first, _):
        async with running_gateway(write_config(tmp_path / "a")):
            pass
    with statements() as (_, second):
        async with running_gateway(write_config(tmp_path / "b")):
            pass
    assert first, "the first start ran nothing: the check below would prove nothing"
    assert [sql for sql in second if sql in first] == []


async def test_an_engine_on_another_backend_never_runs_the_sql_compiled_for_the_first(
        tmp_path: Path, pg_url: str) -> None:
    """SQLite's and PostgreSQL's SQL differ (their parameters' style): one statement, asked of both in turn,
    is answered by each, and each compiled its own."""
    copy_migrated_sqlite(tmp_path / "gateway.db")
    statement = select(Run.id).where(Run.status == "queued-nowhere")
    for url in (f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}", pg_url, f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"):
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                assert list(await conn.scalars(statement)) == []
                compiled = (await conn.execute(statement)).context.compiled
                assert compiled is not None and compiled.dialect.name == engine.dialect.name
        finally:
            await engine.dispose()
