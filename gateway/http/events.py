"""Fan-out of conversation events to live listeners (the web chat's SSE streams).

Listeners are bounded queues; a listener that falls behind loses events rather than holding
memory forever, and can re-read the conversation from the API. With several replicas on
PostgreSQL a relay (`gateway.http.event_relay`) carries each event to the other replicas' listeners.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any, Protocol

QUEUE_SIZE = 1000


class Relay(Protocol):
    """Carries events between replicas (see `gateway.http.event_relay.EventRelay`)."""

    def send(self, conversation_id: str, event: dict[str, Any]) -> None: ...

    async def watch(self, conversation_id: str) -> None: ...

    def unwatch(self, conversation_id: str) -> None: ...


class EventBus:
    def __init__(self) -> None:
        self._listeners: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)
        self.relay: Relay | None = None

    def publish(self, conversation_id: str, event: dict[str, Any]) -> None:
        """An event of a run of this replica: to the listeners here, and to the other replicas."""
        self.deliver(conversation_id, event)
        if self.relay is not None:
            self.relay.send(conversation_id, event)

    def deliver(self, conversation_id: str, event: dict[str, Any]) -> None:
        """To the listeners of this replica only."""
        for queue in list(self._listeners.get(conversation_id, ())):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    @contextlib.asynccontextmanager
    async def listen(self, conversation_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        first = not self._listeners.get(conversation_id)
        self._listeners[conversation_id].add(queue)
        try:
            if first and self.relay is not None:
                await self.relay.watch(conversation_id)
            yield queue
        finally:
            self._listeners[conversation_id].discard(queue)
            if not self._listeners[conversation_id]:
                del self._listeners[conversation_id]
                if self.relay is not None:
                    self.relay.unwatch(conversation_id)

    def run_ended(self, conversation_id: str, run_id: str, status: str) -> None:
        self.publish(conversation_id, {"type": "run_end", "run_id": run_id, "status": status})
