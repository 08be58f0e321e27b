"""Slack's last delivery of an event, held in this process while the database cannot take it.

An event the store refuses (`StoreUnavailable`) is not acked, so Slack delivers it again: that
redelivery is durable (Slack keeps it across our restart; memory does not). But Slack retries an
unacked event three times only (Socket Mode's `retry_attempt`, HTTP's `X-Slack-Retry-Num`: at
once, after about a minute, after about five), and the third retry unacked is the person's
message gone. So that one is acked and held here instead, and stored once the database answers
again: retried on the loop with backoff, oldest first. A held event is still one message however
often it arrives: the core's `submit` is idempotent by event key (a later redelivery, another
replica's copy).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from gateway.clock import Clock
from gateway.reconnect import Backoff
from gateway.store.availability import StoreUnavailable

from .normalize import BotIdentity

LAST_RETRY = 3  # Slack's third retry of an unacked event is its last delivery
# Bounds on what memory holds for Slack: a database down for long, or a flood of events, must not
# grow the process without end. 200 event bodies (a few KB each) are at most a few MB, and more
# than reach their last retry while a lock or a failover lasts; past that the database is down,
# not busy, and `/readyz` says so. 15 minutes: well past the ~5 minutes of Slack's own retries;
# an answer later than that is hardly one (the person has asked again by then, or given up).
HELD_EVENTS = 200
HELD_FOR = 15 * 60.0  # seconds
# Between passes over the held events while the database refuses them: soon at first (a lock is
# mostly short), then at most every 30 s (no busy-polling of a database that is down).
RETRY_BASE, RETRY_CAP = 1.0, 30.0
STOPPED = "the binding stopped before the database answered"


@dataclass(frozen=True)
class _Held:
    event_id: str
    body: dict[str, Any]
    bot: BotIdentity
    since: float  # when it was held, on the adapter's clock


class HeldEvents:
    """The last deliveries acked while the store was refusing them, until it takes them."""

    def __init__(self, store: Callable[[dict[str, Any], BotIdentity], Awaitable[None]],
                 spawn: Callable[[Coroutine[Any, Any, None]], None], stopping: Callable[[], bool], clock: Clock,
                 log: logging.Logger) -> None:
        self._store, self._spawn, self._stopping, self._clock, self._log = store, spawn, stopping, clock, log
        self._held: collections.deque[_Held] = collections.deque()
        self._retrying = False

    def take(self, body: dict[str, Any], bot: BotIdentity, retry_attempt: int | None) -> bool:
        """Whether the adapter acks an event the store refused: its last delivery (held, or lost
        past the cap, said in the log either way). False on an earlier one: it is not acked, and
        Slack's own redelivery carries it."""
        if (retry_attempt or 0) < LAST_RETRY:
            return False
        held = _Held(str(body.get("event_id", "?")), body, bot, self._clock.monotonic())
        # Either way acked all the same: without an ack no further delivery would come either.
        if self._stopping():
            # A handler the stop did not wait for (the SDK runs each envelope's in a task of its own):
            # a retry spawned now would outlive the binding.
            self._lost(held, STOPPED)
            return True
        if len(self._held) >= HELD_EVENTS:
            self._lost(held, f"{len(self._held)} events are held already, waiting for the database")
            return True
        self._held.append(held)
        self._log.warning("Slack's last delivery of event %s: acked and held until the database answers",
                          held.event_id)
        if not self._retrying:
            self._retrying = True
            self._spawn(self._retry())
        return True

    async def _retry(self) -> None:
        """Pass over the held events, oldest first, until none is left; a pass ends at the first the
        store refuses, and the next one waits a backoff. The adapter's stop cancels it, waits for it,
        then calls `give_up`."""
        backoff = Backoff(RETRY_BASE, RETRY_CAP)
        try:
            while self._held:
                # Full jitter may draw ~0: a floor, so that a pass never follows a refused one at once.
                await self._clock.sleep(max(RETRY_BASE / 2, backoff.next_delay()))
                while self._held:
                    held = self._held[0]
                    if self._clock.monotonic() - held.since > HELD_FOR:
                        self._held.popleft()
                        self._lost(held, f"the database did not answer for {HELD_FOR / 60:.0f} minutes")
                        continue
                    try:
                        await self._store(held.body, held.bot)
                    except StoreUnavailable as e:
                        self._log.debug("held event %s still waits: %s (%s)", held.event_id, e.what, e)
                        break
                    except Exception:  # a bug, not the database: retrying would fail the same way
                        self._held.popleft()
                        self._log.exception("Slack's last delivery of event %s was lost: storing it failed",
                                            held.event_id)
                        continue
                    self._held.popleft()
                    backoff.reset()
                    self._log.info("held event %s stored after %.0f s", held.event_id,
                                   self._clock.monotonic() - held.since)
        finally:
            self._retrying = False

    def give_up(self) -> None:
        """The binding stops (its stop has cancelled and awaited `_retry`): what is held is lost."""
        while self._held:
            self._lost(self._held.popleft(), STOPPED)
        self._retrying = False  # a retry cancelled before it ran never reached its `finally`

    def _lost(self, held: _Held, why: str) -> None:
        self._log.warning("Slack's last delivery of event %s was lost: %s", held.event_id, why)
