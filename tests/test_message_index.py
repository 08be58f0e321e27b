"""The messages' full-text index on SQLite, kept up to date after the messages' transactions (0017).

What must hold: a search finds a message stored a moment before it; the index never holds other
text than the messages' own, whatever was edited or deleted before or after its batch; a process
that dies before indexing loses nothing; and a message's own transaction writes nothing to the
index (that was the point: FTS5's segment per commit, twice a message).
"""

from __future__ import annotations

import contextlib
import random
from pathlib import Path

from alembic import command
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import message_index
from gateway.store.conversation_search import ConversationSearch
from gateway.store.engine import alembic_config, create_engine, migrate
from gateway.store.repo import FINISHED, ConversationRef, FinalRow, Store

from .conftest import run_finished, running_gateway, wait_for, write_config
from .support.locking import another_process_holds_the_lock

WORDS = ("heron", "quartz", "lantern", "meadow", "copper", "violet", "harbor", "ember")


async def _message(store: Store, n: int, text: str) -> str:
    """A person's DM and the reply to it, as the daemon stores them; the run's id."""
    identity = await store.identify("web", "local", "ann", "Ann")
    ingested = await store.ingest(
        binding_id="web", event_ids=[f"e{n}"], identity=identity, account_id="ann", text=text, agent_id="a",
        conversation=ConversationRef("", f"web:local:ann:{n}", "web", "web", "local", f"c{n}", None, "dm"),
        platform_message_id=None, queue_limit=10, start=True)
    await store.end_run(ingested.run_id, FINISHED, reply=f"you said {text}", deliveries=[FinalRow(0, "p", "x")])
    return identity.person_id


async def _scalar(engine: AsyncEngine, sql: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.exec_driver_sql(sql)).scalar_one())


async def test_a_search_finds_a_message_stored_a_moment_before_it(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    await migrate(engine)
    store = Store(engine)
    person = await _message(store, 1, "where did the heron go")
    found = await ConversationSearch(store.sessions).search(person, "heron", 5)
    assert [f.passage for f in found.found] == ["where did the **heron** go"]
    await engine.dispose()


async def test_a_messages_transaction_writes_nothing_to_the_index(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    await migrate(engine)
    store = Store(engine)
    await _message(store, 0, "a first message")
    await message_index.catch_up(engine)
    segments = await _scalar(engine, "SELECT count(*) FROM messages_fts_data")
    for n in range(1, 6):
        await _message(store, n, f"message {n} about copper")
    assert await _scalar(engine, "SELECT count(*) FROM messages_fts_data") == segments
    assert await message_index.catch_up(engine) == 10  # five messages and their replies, in one batch
    assert await _scalar(engine, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'copper'") == 10
    await engine.dispose()


async def test_the_index_holds_exactly_the_messages_text_whatever_was_edited_or_deleted(tmp_path: Path) -> None:
    """Edits and deletes of messages indexed and not yet indexed, batches in between: FTS5's own
    integrity check against the messages, and every word's matches against the texts themselves."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    await migrate(engine)
    store = Store(engine)
    rng = random.Random(37)
    for n in range(60):
        await _message(store, n, " ".join(rng.sample(WORDS, 3)))
        async with engine.begin() as conn:
            ids = (await conn.exec_driver_sql("SELECT id FROM messages")).scalars().all()
            for _ in range(2):
                chosen, what = rng.choice(ids), rng.random()
                if what < 0.3:
                    await conn.exec_driver_sql("UPDATE messages SET text = ? WHERE id = ?",
                                               (" ".join(rng.sample(WORDS, 2)), chosen))
                elif what < 0.4:
                    await conn.exec_driver_sql("DELETE FROM messages WHERE id = ?", (chosen,))
        if rng.random() < 0.3:
            await message_index.catch_up(engine)
    await message_index.catch_up(engine)
    async with engine.connect() as conn:
        await conn.exec_driver_sql("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
        texts = dict((await conn.exec_driver_sql("SELECT id, text FROM messages")).all())
        for word in WORDS:
            matched = (await conn.exec_driver_sql(
                f"SELECT rowid FROM messages_fts WHERE messages_fts MATCH '{word}'")).scalars().all()
            assert sorted(matched) == sorted(i for i, t in texts.items() if word in t.split()), word
    await engine.dispose()


async def test_messages_a_dead_process_never_indexed_are_found_by_the_next(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 's.db'}"
    engine = create_engine(url)
    await migrate(engine)
    person = await _message(Store(engine), 1, "the lantern by the harbor")
    await engine.dispose()  # gone before any batch: only the note was written, with the message
    engine = create_engine(url)
    await migrate(engine)
    found = await ConversationSearch(Store(engine).sessions).search(person, "lantern", 5)
    assert len(found.found) == 1
    await engine.dispose()


async def test_going_back_to_0016_indexes_what_was_still_waiting(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 's.db'}")
    await migrate(engine)
    await _message(Store(engine), 1, "violet meadow")
    async with engine.begin() as conn:
        await conn.run_sync(lambda sync: command.downgrade(alembic_config(sync), "0016"))
    assert await _scalar(engine, "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'meadow'") == 2
    async with engine.begin() as conn:
        await conn.exec_driver_sql("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)")
    await engine.dispose()


async def test_a_search_while_another_process_holds_the_lock_answers_with_what_is_indexed(tmp_path: Path) -> None:
    """Indexing needs the write lock, matching does not (WAL): a lock held elsewhere past the bound
    delays a search, it never fails it; what waited to be indexed is found once the lock is gone."""
    path = tmp_path / "s.db"
    engine = create_engine(f"sqlite+aiosqlite:///{path}", busy_timeout=0.3)
    await migrate(engine)
    store = Store(engine)
    search = ConversationSearch(store.sessions)
    person = await _message(store, 1, "the quartz clock")
    await message_index.catch_up(engine)
    await _message(store, 2, "the ember glow")  # noted, not indexed yet
    async with another_process_holds_the_lock(path, 30) as released:
        assert len((await search.search(person, "quartz", 5)).found) == 1
        assert (await search.search(person, "ember", 5)).found == []
        released.let_go()
    assert len((await search.search(person, "ember", 5)).found) == 1
    await engine.dispose()


async def test_the_daemon_indexes_what_was_said_without_waiting_for_a_search(tmp_path: Path) -> None:
    """The sweep indexes what waits (every third of a run's lease; the shortest lease here): the notes
    do not pile up until someone searches."""
    import sqlite3

    import aiohttp

    config = write_config(tmp_path / "config", gateway={"database": {"run_lease_seconds": 3}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        sent = await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "a copper heron"})).json()
        await wait_for(lambda: run_finished(gw, sent["run_id"]), what="the answer")

        def indexed() -> bool:
            with contextlib.closing(sqlite3.connect(config / "gateway.db")) as db:
                waiting = db.execute("SELECT count(*) FROM messages_fts_pending").fetchone()[0]
                found = db.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'heron'").fetchone()[0]
                said = db.execute("SELECT count(*) FROM messages WHERE text LIKE '%heron%'").fetchone()[0]
            return waiting == 0 and found == said > 0  # the message, and the reply if it repeats it

        await wait_for(indexed, what="the message indexed by the sweep")
