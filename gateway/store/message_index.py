"""The messages' full-text index on SQLite, brought up to date in batches after the messages' own
transactions (migration 0017).

A message's transaction only notes its id (`messages_fts_pending`, by trigger); `catch_up` indexes
what is noted. Indexing one message in its own transaction cost ~90 us of the ingest and ~100 us
of the run's end, most of it FTS5 writing a one-row segment at every commit; a batch writes one
segment for all of them (~12 us a message, batches of 100). Two callers: the daemon's sweep (so few
notes wait long) and every conversation search, before it matches (so a search finds what was
stored a moment before it; nothing noted is ever left out of a result). Notes are rows of the
database: a process that dies before its batch leaves them for the next one.

PostgreSQL needs none of it (its tsvector is a generated column): `catch_up` returns at once.
"""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store import driver

BATCH = 200  # messages a transaction indexes: ~2.5 ms of the loop's time, then it may do other work


def _batch(q: driver.Statements) -> driver.Program[int]:
    """Index the oldest BATCH noted messages and drop their notes; how many there were."""
    row = yield q.one("SELECT count(*), max(id) FROM (SELECT id FROM messages_fts_pending ORDER BY id LIMIT :n)",
                      n=BATCH)
    count, last = row or (0, None)
    if not count:
        return 0
    yield q.run("INSERT INTO messages_fts (rowid, text) SELECT m.id, m.text FROM messages_fts_pending p"
                " JOIN messages m ON m.id = p.id WHERE p.id <= :last", last=last)
    yield q.run("DELETE FROM messages_fts_pending WHERE id <= :last", last=last)
    return int(count)


async def catch_up(engine: AsyncEngine) -> int:
    """Index every message noted so far, a batch per transaction; how many were indexed."""
    if engine.dialect.name != "sqlite":
        return 0
    indexed = 0
    while True:
        done = await driver.transaction(engine, _batch)
        indexed += done
        if done < BATCH:
            return indexed
        await asyncio.sleep(0)  # an inline batch never yields: let the loop run between batches
