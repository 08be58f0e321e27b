"""The first sign of work: the platform's typing indicator, as soon as a message is stored and admitted.

What a person sees first should not wait for the run to be claimed, its conversation read and its
agent built. The dispatcher calls `show` right after the message is stored; the indicator goes out
from a task of its own, concurrently with the run starting (and with the adapter's ack or offset
write). The run does not wait for the platform's answer to it: the request is written in the
task's first step, and on a platform far away its answer comes long after the run has asked its
model (waiting for it held every run up to 5 ms for nothing; bench/README.md, Round 10).

One rule for when an indicator goes out: when the person would otherwise see none while their
message is being worked on. So, per conversation:
- a message's arrival shows one, unless a run of its conversation is working here: that run keeps
  the indicator up, and its reply clears it (Telegram, Slack and Mattermost all clear the bot's
  indicator when the bot posts), after which the next run shows its own;
- a run's renewals (the runner's) count the arrival sign as their first while it still shows
  (`run_started`'s `Working.since` says how long ago it went out), and start at once when none shows.

An indicator never queues for the platform's budget (`show_typing`): one that cannot go out now
is skipped, as it would be stale by the time it went. Queued, hundreds of runs' indicators stood
in front of every final answer sharing the bot's budget (Telegram's 30 a second).
"""

from __future__ import annotations

import asyncio
import collections
import logging

from gateway.clock import Clock
from gateway.outbound.budget import impatient
from gateway.outbound.adapter import Adapter, ReplyTarget
from gateway.tasks import cancel_and_wait

log = logging.getLogger("gateway.runs.runner")

KEEP = 60.0  # seconds a sign is remembered for a run that has not started yet
TYPING_PATIENCE = 0.25  # seconds an indicator may wait for the budget before it is skipped


class TypingIndicator:
    """Typing indicators shown on arrival; owned by the gateway (`close` on stop)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or Clock()  # the gateway's: a test moves it rather than waiting
        self._shown: dict[str, float] = {}  # conversation id -> when its sign went out
        self._working: collections.Counter[str] = collections.Counter()  # conversation id -> its runs here
        self._tasks: set[asyncio.Task[None]] = set()

    async def show(self, adapter: Adapter | None, target: ReplyTarget, conversation_id: str) -> None:
        """Show the indicator in `target` now (none while a run of the conversation works here);
        returns once it is on its way, not answered."""
        if adapter is None or conversation_id in self._working:
            return
        now = self._clock.monotonic()
        if len(self._shown) > 1000:  # runs that never came (a stop, a failed claim): forget them
            self._shown = {k: t for k, t in self._shown.items() if now - t < KEEP}
        self._shown[conversation_id] = now
        task = asyncio.create_task(show_typing(adapter, target), name=f"first-sign:{conversation_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await asyncio.sleep(0)  # its first step (the request written) runs before the caller's next one

    def run_started(self, conversation_id: str) -> Working:
        """A run of the conversation starts working here: it keeps the indicator up until its
        `Working.end` (its reply posted, or the run over), and learns how long ago the arrival sign went out."""
        self._working[conversation_id] += 1
        shown = self._shown.pop(conversation_id, None)
        return Working(self, conversation_id, None if shown is None else self._clock.monotonic() - shown)

    def _ended(self, conversation_id: str) -> None:
        self._working[conversation_id] -= 1
        if self._working[conversation_id] <= 0:
            del self._working[conversation_id]

    async def close(self) -> None:
        await cancel_and_wait(*self._tasks)
        self._shown.clear()


class Working:
    """One run keeping its conversation's indicator up (`TypingIndicator.run_started`). `end` may be
    called at each place the indicator is cleared (the reply, a notice, a card, the run's end): the
    first counts, so a conversation is never left marked working, nor unmarked for another run."""

    __slots__ = ("_indicator", "_conversation_id", "since")

    def __init__(self, indicator: TypingIndicator, conversation_id: str, since: float | None) -> None:
        self._indicator: TypingIndicator | None = indicator
        self._conversation_id = conversation_id
        self.since = since  # seconds since the arrival sign went out; None when none did

    def end(self) -> None:
        if self._indicator is not None:
            self._indicator._ended(self._conversation_id)
            self._indicator = None


async def show_typing(adapter: Adapter, target: ReplyTarget) -> None:
    """The platform's typing indicator, if the budget has room for it now; never raises."""
    try:
        with impatient(TYPING_PATIENCE):
            await adapter.show_typing(target)
    except Exception as e:  # an indicator is a nicety (over budget included); never fail anything over it
        log.debug("typing indicator not shown: %s", e)
