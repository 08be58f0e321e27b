"""In-process fan-out of conversation events to live listeners (the web chat's SSE streams).

Listeners are bounded queues; a listener that falls behind loses events rather than holding
memory forever, and can re-read the conversation from the API.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator
from typing import Any

QUEUE_SIZE = 1000


class EventBus:
    def __init__(self) -> None:
        self._listeners: dict[str, set[asyncio.Queue[dict[str, Any]]]] = defaultdict(set)

    def publish(self, conversation_id: str, event: dict[str, Any]) -> None:
        for queue in list(self._listeners.get(conversation_id, ())):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(event)

    @contextlib.asynccontextmanager
    async def listen(self, conversation_id: str) -> AsyncIterator[asyncio.Queue[dict[str, Any]]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self._listeners[conversation_id].add(queue)
        try:
            yield queue
        finally:
            self._listeners[conversation_id].discard(queue)
            if not self._listeners[conversation_id]:
                del self._listeners[conversation_id]

    def run_ended(self, conversation_id: str, run_id: str, status: str) -> None:
        self.publish(conversation_id, {"type": "run_end", "run_id": run_id, "status": status})
