"""The first sign of work: the platform's typing indicator, as soon as a message is stored and admitted.

What a person sees first should not wait for the run to be claimed, its conversation read and its
agent built. The dispatcher calls `show` right after the message is stored; the indicator goes out
from a task of its own, concurrently with the run starting (and with the adapter's ack or offset
write). The runner's typing renewals then start one interval later when a sign went out moments
before (`taken`), so the platform sees one call, not two.

An indicator never queues for the platform's budget (`show_typing`): one that cannot go out now
is skipped, as it would be stale by the time it went. Queued, hundreds of runs' indicators stood
in front of every final answer sharing the bot's budget (Telegram's 30 a second).
"""

from __future__ import annotations

import asyncio
import logging

from gateway.clock import Clock
from gateway.outbound.budget import impatient
from gateway.outbound.adapter import Adapter, ReplyTarget
from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.runs.runner")

KEEP = 60.0  # seconds a sign is remembered for a run that has not started yet
TYPING_PATIENCE = 0.25  # seconds an indicator may wait for the budget before it is skipped
HEAD_START = 0.005  # seconds a run may wait for its sign's answer (on loopback: all of it; far away: a sliver)


class TypingIndicator:
    """Typing indicators shown on arrival; owned by the gateway (`close` on stop)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or Clock()  # the gateway's: a test moves it rather than waiting
        self._shown: dict[str, float] = {}  # conversation id -> when its sign went out
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[str, asyncio.Task[None]] = {}  # conversation id -> its sign, until its run starts

    async def show(self, adapter: Adapter | None, target: ReplyTarget, conversation_id: str) -> None:
        """Show the indicator in `target` now; returns once it is on its way, not answered."""
        if adapter is None:
            return
        now = self._clock.monotonic()
        if len(self._shown) > 1000:  # runs that never came (a stop, a failed claim): forget them
            self._shown = {k: t for k, t in self._shown.items() if now - t < KEEP}
            self._pending = {k: t for k, t in self._pending.items() if not t.done()}
        self._shown[conversation_id] = now
        task = asyncio.create_task(show_typing(adapter, target), name=f"first-sign:{conversation_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self._pending[conversation_id] = task
        await asyncio.sleep(0)  # its first step runs before the caller's next one (the ack, the next poll)

    async def head_start(self, conversation_id: str, at_most: float = HEAD_START) -> None:
        """Give the conversation's sign, if one is on its way, up to `at_most` seconds to be answered
        before the run's heavier work starts (a platform SDK request takes many small steps,
        and a run's steps between them are long)."""
        task = self._pending.pop(conversation_id, None)
        if task is None or task.done():
            await asyncio.sleep(0)  # no sign on its way (a resumed run): the run's typing loop steps first
        else:
            await asyncio.wait({task}, timeout=at_most)

    def taken(self, conversation_id: str, within: float) -> bool:
        """Whether a sign went out in this conversation less than `within` seconds ago (once)."""
        shown = self._shown.pop(conversation_id, None)
        return shown is not None and self._clock.monotonic() - shown < within

    async def close(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._shown.clear()
        self._pending.clear()


async def show_typing(adapter: Adapter, target: ReplyTarget) -> None:
    """The platform's typing indicator, if the budget has room for it now; never raises."""
    try:
        with impatient(TYPING_PATIENCE):
            await adapter.show_typing(target)
    except Exception as e:  # an indicator is a nicety (over budget included); never fail anything over it
        log.debug("typing indicator not shown: %s", e)
