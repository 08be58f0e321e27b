"""The `stream_events` table: web conversations' live events, shared by replicas on PostgreSQL.

Rows are stamped with the database's clock (`now()`), never a replica's, so "what was written
since I last looked" means the same on every replica. NOTIFY carries only who published and for
which conversation: the events themselves are read from the table (no 8,000-byte payload limit,
and a replica that missed notifications reads the same rows).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.store.models import StreamEvent

CHANNEL = "gateway_stream"  # the NOTIFY channel every replica LISTENs on


@dataclass(frozen=True, slots=True)
class StoredEvent:
    id: int
    conversation_id: str
    body: str  # JSON
    created_at: datetime


class StreamEvents:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def append(self, origin: str, events: Sequence[tuple[str, str]]) -> None:
        """Store `(conversation id, JSON)` events in order and notify each conversation once, in
        one transaction (NOTIFY is delivered at commit, when the rows are visible)."""
        if not events:
            return
        async with self._engine.begin() as conn:
            await conn.execute(
                insert(StreamEvent).values([
                    {"conversation_id": conv, "origin": origin, "body": body, "created_at": func.now()}
                    for conv, body in events
                ])
            )
            for conv in dict.fromkeys(conv for conv, _ in events):
                await conn.execute(text("SELECT pg_notify(:channel, :payload)"),
                                   {"channel": CHANNEL, "payload": f"{origin} {conv}"})

    async def now(self) -> datetime:
        async with self._engine.connect() as conn:
            return (await conn.execute(select(func.now()))).scalar_one()

    async def since(self, origin: str, conversation_ids: Collection[str], after: datetime,
                    skip: Collection[int]) -> tuple[datetime, list[StoredEvent]]:
        """Events other replicas wrote for these conversations after `after` (minus the ids in
        `skip`, already shown), oldest first; and the database's time when the read began."""
        async with self._engine.begin() as conn:
            now = (await conn.execute(select(func.now()))).scalar_one()
            query = (
                select(StreamEvent.id, StreamEvent.conversation_id, StreamEvent.body, StreamEvent.created_at)
                .where(StreamEvent.conversation_id.in_(list(conversation_ids)), StreamEvent.origin != origin,
                       StreamEvent.created_at > after)
                .order_by(StreamEvent.id)
            )
            if skip:
                query = query.where(StreamEvent.id.not_in(list(skip)))
            rows = (await conn.execute(query)).all()
        return now, [StoredEvent(r.id, r.conversation_id, r.body, r.created_at) for r in rows]

    async def prune(self, keep: timedelta) -> int:
        """Delete events older than `keep` (by the database's clock)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(delete(StreamEvent).where(StreamEvent.created_at < func.now() - keep))
            return int(getattr(result, "rowcount", 0) or 0)


__all__ = ["CHANNEL", "StoredEvent", "StreamEvents"]
