"""Pruning what would otherwise grow forever, in small batches, and how big each table is.

The inbound ledger must outlive every platform's redelivery window (Slack retries for about an
hour, Telegram keeps updates 24 hours, a paused webhook queue longer): so its floor is 7 days.
Delivery rows matter while a reply may still be edited or a run resumed; ended runs only for
`agent-gateway runs list` and audits. Queued, running and parked runs are never touched, nor are
the conversation's messages (its history).

Two kinds of row hang off a run without naming it in a column the runs prune can join, and go on
the delivery rows' schedule: a file share's delivery row (keyed `file-<hash of the run and the
files>`, gateway/outbound/files.py: it says how far a share got, which matters only while its run
may resume), and what the gateway recorded of the files people attached to a run's messages
(capability state "attachments", scope `run:<id>`: names, types, the platform's references; it is
how `view_image` finds an earlier image, so that looks back as far as `deliveries_days`). A live
run's attachments stay; a live run's file row older than `deliveries_days` is gone, which only
matters to a run parked that long (an approval's timeout is far shorter).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text

from gateway.store.repo import FILE_DELIVERY, Store

LIVE = ("queued", "running", "parked")


@dataclass(frozen=True)
class Retention:
    ledger_days: float = 14.0
    deliveries_days: float = 30.0
    runs_days: float = 90.0
    batch: int = 500


# Each statement deletes one batch of the oldest rows past the cut-off, by primary key order.
_PRUNE = {
    "inbound_ledger": "DELETE FROM inbound_ledger WHERE id IN (SELECT id FROM inbound_ledger"
                      " WHERE received_at < :cut ORDER BY id LIMIT :n)",
    "deliveries": "DELETE FROM deliveries WHERE id IN (SELECT d.id FROM deliveries d JOIN runs r ON r.id = d.run_id"
                  " WHERE d.updated_at < :cut AND r.status NOT IN ('queued', 'running', 'parked')"
                  " ORDER BY d.id LIMIT :n)",
    "file_deliveries": "DELETE FROM deliveries WHERE id IN (SELECT id FROM deliveries"
                       f" WHERE run_id LIKE '{FILE_DELIVERY}%' AND updated_at < :cut ORDER BY id LIMIT :n)",
    "attachments": "DELETE FROM capability_state WHERE capability = 'attachments' AND scope IN (SELECT c.scope"
                   " FROM capability_state c WHERE c.capability = 'attachments' AND c.updated_at < :cut"
                   " AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.status IN ('queued', 'running', 'parked')"
                   " AND 'run:' || r.id = c.scope) ORDER BY c.scope LIMIT :n)",
    "runs": "DELETE FROM runs WHERE id IN (SELECT id FROM runs WHERE status NOT IN ('queued', 'running', 'parked')"
            " AND COALESCE(finished_at, created_at) < :cut"
            " AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.run_id = runs.id) ORDER BY created_at LIMIT :n)",
    # Ended background runs (their transcripts) go with the ended runs; their reports stay in the messages.
    "background_runs": "DELETE FROM background_runs WHERE id IN (SELECT id FROM background_runs"
                       " WHERE status <> 'running' AND COALESCE(finished_at, created_at) < :cut"
                       " ORDER BY created_at LIMIT :n)",
    # A scheduled task's claims for times long past (its next occurrence is always later than any of
    # them, so none is claimed again), and tasks that ended (cancelled, or a one-shot done).
    "schedule_occurrences": "DELETE FROM schedule_occurrences WHERE (task_id, due_at) IN (SELECT task_id, due_at"
                            " FROM schedule_occurrences WHERE claimed_at < :cut ORDER BY claimed_at LIMIT :n)",
    "scheduled_tasks": "DELETE FROM scheduled_tasks WHERE id IN (SELECT id FROM scheduled_tasks"
                       " WHERE status IN ('cancelled', 'done') AND updated_at < :cut"
                       " AND NOT EXISTS (SELECT 1 FROM schedule_occurrences o WHERE o.task_id = scheduled_tasks.id)"
                       " ORDER BY updated_at LIMIT :n)",
}

TABLES = ("inbound_ledger", "deliveries", "runs", "background_runs", "messages", "conversations", "approvals",
          "approval_cards", "memory_notes", "capability_state", "knowledge_chunks", "scheduled_tasks",
          "schedule_occurrences")


async def prune(store: Store, retention: Retention, now: datetime, *, pause: float = 0.05) -> dict[str, int]:
    """Delete what is past its retention, one short transaction per batch with a pause between,
    so live messages never wait long behind it. Returns rows deleted per table."""
    cuts = {"inbound_ledger": now - timedelta(days=max(retention.ledger_days, 7.0)),
            "deliveries": now - timedelta(days=retention.deliveries_days),
            "file_deliveries": now - timedelta(days=retention.deliveries_days),
            "attachments": now - timedelta(days=retention.deliveries_days),
            "runs": now - timedelta(days=retention.runs_days),
            "background_runs": now - timedelta(days=retention.runs_days),
            "schedule_occurrences": now - timedelta(days=retention.runs_days),
            "scheduled_tasks": now - timedelta(days=retention.runs_days)}
    deleted = dict.fromkeys(_PRUNE, 0)
    for table, sql in _PRUNE.items():  # deliveries before runs: a run goes once its rows are gone
        while True:
            async with store.sessions() as s, s.begin():
                gone = (await s.execute(text(sql), {"cut": cuts[table], "n": retention.batch})).rowcount or 0
            deleted[table] += gone
            if gone < retention.batch:
                break
            await asyncio.sleep(pause)
    return deleted


async def table_sizes(store: Store) -> list[tuple[str, int, int | None]]:
    """(table, rows, bytes on disk where the engine says) for the tables that grow."""
    out: list[tuple[str, int, int | None]] = []
    postgres = store.engine.dialect.name == "postgresql"
    async with store.sessions() as s:
        for table in TABLES:
            rows = (await s.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
            size: int | None = None
            if postgres:
                size = (await s.execute(text("SELECT pg_total_relation_size(:t)"), {"t": table})).scalar_one()
            else:
                try:
                    size = (await s.execute(text("SELECT sum(pgsize) FROM dbstat WHERE name = :t"), {"t": table})).scalar()
                except Exception:  # SQLite built without the dbstat table
                    size = None
            out.append((table, int(rows), int(size) if size is not None else None))
    return out
