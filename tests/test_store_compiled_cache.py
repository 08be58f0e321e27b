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


async def _orm_reads(gw: Any) -> None:
    """A few of the store's reads that stay the ORM's (an operator's, a card's)."""
    await gw.store.runs_in(["running"])
    await gw.store.deliveries("no-such-run")
    await gw.store.messages("no-such-conversation")


async def test_a_second_gateway_in_the_process_compiles_none_of_the_statements_the_first_compiled(
        tmp_path: Path) -> None:
    """The store's ORM queries were compiled again by every engine (every gateway start makes one)."""
    with statements() as (first, _):
        async with running_gateway(write_config(tmp_path / "a")) as gw:
            await _orm_reads(gw)
    with statements() as (_, second):
        async with running_gateway(write_config(tmp_path / "b")) as gw:
            await _orm_reads(gw)
    assert first, "the first gateway ran nothing: the check below would prove nothing"
    assert [sql for sql in second if sql in first] == []


async def test_a_start_reads_what_the_last_process_left_without_an_orm_session(tmp_path: Path) -> None:
    """The start's reads (parked approvals due to expire, interrupted runs and background runs, the admin
    schedules and the due ones, the queue) go on the driver: no ORM statement at all (~0.4-0.8 ms of the
    loop's CPU each), and none at the sweeps that repeat them."""
    config = write_config(tmp_path / "a")  # the process's migrated template, made before the count if not yet
    with statements() as (ran, _):
        async with running_gateway(config) as gw:
            await gw.sweep()
    assert ran == []


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
