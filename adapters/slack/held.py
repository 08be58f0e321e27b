"""Slack's last delivery of an event, held in this process while the database cannot take it.

An event the store refuses (`StoreUnavailable`) is not acked, so Slack delivers it again: that
redelivery is durable (Slack keeps it across our restart; memory does not). But Slack retries an
unacked event three times only (Socket Mode's `retry_attempt`, HTTP's `X-Slack-Retry-Num`: at
once, after about a minute, after about five), and the third retry unacked is the person's
message gone. So that one is acked and held here instead, and stored once the database answers
again: retried on the loop with backoff, oldest first. A held event is still one message however
often it arrives: the core's `submit` is idempotent by event key (a later redelivery, another
replica's copy).

Held is also written to the binding's spool on disk (`gateway.spool`) before the ack: a stop, a
restart, a crash or a reload of the binding keeps it, and the next start (the binding connecting)
reads it back and stores it the same way, within the same bounds, counted from when it was first
held. Where the spool cannot be written (a read-only or full disk, one that does not answer within
`SPOOL_WAIT`), the event is held in memory only, as before the spool, and the log says so.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from gateway.clock import Clock
from gateway.reconnect import Backoff
from gateway.spool import Spool
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
TOO_OLD = f"the database did not answer for {HELD_FOR / 60:.0f} minutes"
# How long an ack waits for the spool's write (a few ms on a local disk): a disk that hangs (a network
# mount) must not hold the ack back until Slack gives up on it; past this it is held in memory only.
SPOOL_WAIT = 2.0  # seconds


def _too_many(held: int) -> str:
    return f"{held} events are held already, waiting for the database"


@dataclass(frozen=True)
class _Held:
    event_id: str
    body: dict[str, Any]
    bot: BotIdentity
    since: float  # when it was held, on the adapter's clock
    held_at: float  # the same, as wall-clock seconds: what a spooled event's age is counted from after a restart
    spooled: bool = False  # on disk: a stop keeps it for the next start

    def record(self) -> dict[str, Any]:
        # Without Slack's verification token (the Events API's `token`, checked already and never read
        # again): a secret is not written to disk for the sake of a message.
        body = {k: v for k, v in self.body.items() if k != "token"}
        return {"event_id": self.event_id, "body": body, "held_at": self.held_at,
                "bot": {"user_id": self.bot.user_id, "bot_id": self.bot.bot_id}}


def _parse(record: dict[str, Any]) -> tuple[str, dict[str, Any], BotIdentity, float]:
    """A spool entry's fields; KeyError / TypeError / ValueError for one that is not ours (set aside)."""
    body, bot = record["body"], record["bot"]
    if not isinstance(body, dict) or not isinstance(bot, dict):
        raise TypeError("body and bot are objects")
    return str(record["event_id"]), body, BotIdentity(str(bot["user_id"]), str(bot.get("bot_id", ""))), \
        float(record["held_at"])


class HeldEvents:
    """The last deliveries acked while the store was refusing them, until it takes them."""

    def __init__(self, store: Callable[[dict[str, Any], BotIdentity], Awaitable[None]],
                 spawn: Callable[[Coroutine[Any, Any, None]], None], stopping: Callable[[], bool], clock: Clock,
                 log: logging.Logger, spool: Spool | None = None) -> None:
        self._store, self._spawn, self._stopping, self._clock, self._log = store, spawn, stopping, clock, log
        self._spool = spool
        self._held: collections.deque[_Held] = collections.deque()
        self._writing = 0  # takes writing to the spool now: counted against the bound already
        self._retrying = False
        self._resumed = False

    async def take(self, body: dict[str, Any], bot: BotIdentity, retry_attempt: int | None) -> bool:
        """Whether the adapter acks an event the store refused: its last delivery (held, or lost
        past the cap, said in the log either way). False on an earlier one: it is not acked, and
        Slack's own redelivery carries it."""
        if (retry_attempt or 0) < LAST_RETRY:
            return False
        held = _Held(str(body.get("event_id", "?")), body, bot, self._clock.monotonic(), self._clock.now().timestamp())
        # Either way acked all the same: without an ack no further delivery would come either.
        if self._stopping() and self._spool is None:
            # A handler the stop did not wait for (the SDK runs each envelope's in a task of its own):
            # a retry spawned now would outlive the binding.
            self._lost(held, STOPPED)
            return True
        if len(self._held) + self._writing >= HELD_EVENTS:
            self._lost(held, _too_many(len(self._held) + self._writing))
            return True
        self._writing += 1
        try:
            held = await self._write(held)
        finally:
            self._writing -= 1
        if self._stopping():
            # As above; but on disk it waits for the next start, which reads it back.
            if held.spooled:
                self._log.warning("Slack's last delivery of event %s: acked and kept in the spool for the next start "
                                  "(the binding is stopping)", held.event_id)
            else:
                self._lost(held, STOPPED)
            return True
        self._hold(held)
        self._log.warning("Slack's last delivery of event %s: acked and held until the database answers%s",
                          held.event_id, "" if held.spooled else " (in memory only)")
        return True

    async def resume(self) -> None:
        """Once per start (the binding connecting): what the spool kept from before (a stop, a
        crash, a reload) is held again, its age counted from when it was first held; one past a
        bound is lost as it would have been in the process that held it."""
        if self._resumed or self._spool is None:
            return
        self._resumed = True
        stored = await asyncio.to_thread(self._spool.load, _parse)
        now, monotonic = self._clock.now().timestamp(), self._clock.monotonic()
        known = {h.event_id for h in self._held}
        for event_id, body, bot, held_at in sorted(stored, key=lambda entry: entry[3]):
            if event_id in known:
                continue
            known.add(event_id)
            held = _Held(event_id, body, bot, monotonic - max(0.0, now - held_at), held_at, spooled=True)
            if now - held_at > HELD_FOR:
                await self._drop(held, TOO_OLD)
            elif len(self._held) >= HELD_EVENTS:
                await self._drop(held, _too_many(len(self._held)))
            else:
                self._log.info("Slack's last delivery of event %s: read back from the spool, held until the "
                               "database answers", event_id)
                self._hold(held)

    async def _write(self, held: _Held) -> _Held:
        """`held` on disk, or in memory only where the spool cannot take it soon (said in the log)."""
        if self._spool is None:
            return held
        try:
            await asyncio.wait_for(asyncio.to_thread(self._spool.put, held.event_id, held.record()), SPOOL_WAIT)
        except TimeoutError:
            # The write may still land: the entry is removed once stored all the same (`_drop`).
            self._log.warning("the spool %s did not answer within %.0f s: event %s is held in memory only",
                              self._spool.directory, SPOOL_WAIT, held.event_id)
            return held
        except OSError as e:
            self._log.warning("the spool %s cannot be written (%s): event %s is held in memory only",
                              self._spool.directory, e, held.event_id)
            return held
        return replace(held, spooled=True)

    def _hold(self, held: _Held) -> None:
        self._held.append(held)
        if not self._retrying:
            self._retrying = True
            self._spawn(self._retry())

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
                        await self._drop(held, TOO_OLD)
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
                        await self._drop(held, None)
                        continue
                    self._held.popleft()
                    await self._drop(held, None)
                    backoff.reset()
                    self._log.info("held event %s stored after %.0f s", held.event_id,
                                   self._clock.monotonic() - held.since)
        finally:
            self._retrying = False

    def give_up(self) -> None:
        """The binding stops (its stop has cancelled and awaited `_retry`): what is held in memory
        only is lost; what is spooled waits there for the next start."""
        while self._held:
            held = self._held.popleft()
            if held.spooled:
                self._log.info("Slack's last delivery of event %s: kept in the spool for the next start", held.event_id)
            else:
                self._lost(held, STOPPED)
        self._retrying = False  # a retry cancelled before it ran never reached its `finally`
        self._resumed = False  # the next start reads the spool again

    async def _drop(self, held: _Held, why: str | None) -> None:
        """Done with `held`: stored (`why` None) or lost. Off the spool either way (a write that
        timed out may have landed after all)."""
        if self._spool is not None:
            await asyncio.to_thread(self._spool.remove, held.event_id)
        if why is not None:
            self._lost(held, why)

    def _lost(self, held: _Held, why: str) -> None:
        self._log.warning("Slack's last delivery of event %s was lost: %s", held.event_id, why)
