"""Time, injectable: expiry and pacing read a Clock so tests move time instead of sleeping."""

from __future__ import annotations

import asyncio
import bisect
import itertools
import secrets
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Protocol


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Timer(Protocol):
    """A callback `Clock.call_later` will run, until cancelled (asyncio's TimerHandle is one)."""

    def cancel(self) -> None: ...


class Clock:
    """Wall time for records, monotonic time for pacing; waits on monotonic time go through
    `sleep` and `call_later`, so a test's clock decides when they end."""

    def now(self) -> datetime:
        return utcnow()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time (a wait paced by the clock, not a timeout)."""
        await asyncio.sleep(seconds)

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        """Run `callback` on the running loop once `seconds` of this clock's time have passed."""
        return asyncio.get_running_loop().call_later(seconds, callback)


class _ManualTimer:
    __slots__ = ("due", "order", "callback", "loop", "cancelled")

    def __init__(self, due: float, order: int, callback: Callable[[], object], loop: asyncio.AbstractEventLoop) -> None:
        self.due, self.order, self.callback, self.loop, self.cancelled = due, order, callback, loop, False

    def cancel(self) -> None:
        self.cancelled = True

    def run(self) -> None:
        if not self.cancelled:  # cancelled after it came due, before its turn: as asyncio's handles
            self.callback()

    def __lt__(self, other: _ManualTimer) -> bool:
        return (self.due, self.order) < (other.due, other.order)


class ManualClock(Clock):
    """A clock a test moves: `advance` runs the timers (and ends the sleeps) it moves past.

    `autojump=s`: besides `advance`, the clock also moves itself to the next timer's moment once it
    has been left alone (no timer set or run, no time read, not advanced) for `s` seconds of real
    time, as trio's MockClock does when every task waits on it. A test then drives code that paces
    itself (the send path's budgets, 429 waits, draft timers) without knowing when it will wait;
    a sleep still never ends before its moment, so what is measured on this clock stays true.
    Work the clock cannot see (a request on its way to a fake platform, which reads this clock when
    it arrives) is named by `idle`: no jump while it returns False.
    """

    def __init__(self, start: datetime | None = None, *, autojump: float | None = None,
                 idle: Callable[[], bool] = lambda: True) -> None:
        self._now = start or utcnow()
        self._mono = 0.0
        self._timers: list[_ManualTimer] = []  # sorted by (due, order)
        self._order = itertools.count()
        self._autojump = autojump
        self._touched = 0  # bumped by everything that uses the clock: autojump waits for it to stop
        self._jumper: asyncio.Task[None] | None = None
        self.idle = idle
        self.jumps = 0  # how often autojump moved the clock (a test may check its pacing waited)

    def now(self) -> datetime:
        self._touched += 1
        return self._now

    def monotonic(self) -> float:
        self._touched += 1
        return self._mono

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            timer.cancel()

    def call_later(self, seconds: float, callback: Callable[[], object]) -> Timer:
        self._touched += 1
        loop = asyncio.get_running_loop()
        timer = _ManualTimer(self._mono + max(seconds, 0.0), next(self._order), callback, loop)
        if seconds <= 0:  # due now: at the loop's next turn, as asyncio's call_later(0)
            loop.call_soon(timer.run)
            return timer
        bisect.insort(self._timers, timer)
        if self._autojump is not None and (self._jumper is None or self._jumper.done()):
            self._jumper = loop.create_task(self._jump(self._autojump), name="clock-autojump")
        return timer

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds`; every timer due by then runs, in the order they are due, on
        its loop as asyncio runs a callback (soon after, never inside this call)."""
        self._touched += 1
        target = self._mono + seconds
        while self._timers and self._timers[0].due <= target:
            timer = self._timers.pop(0)
            if timer.cancelled or timer.loop.is_closed():  # a closed loop: a test before this one set it
                continue
            timer.loop.call_soon(timer.run)
        self._now += timedelta(seconds=seconds)  # a test may set wall time back (a schedule's edge)
        self._mono = target

    def next_due(self) -> float | None:
        """Seconds until the earliest timer still set is due (None: none is)."""
        self._timers = [t for t in self._timers if not t.cancelled]
        return max(self._timers[0].due - self._mono, 0.0) if self._timers else None

    async def _jump(self, threshold: float) -> None:
        """While timers are set: once nothing touched the clock for `threshold` real seconds, move
        it to the earliest one."""
        while self.next_due() is not None:
            touched = self._touched
            await asyncio.sleep(threshold)  # real time: the loop's other work goes on meanwhile
            if touched == self._touched and self.idle() and (wait := self.next_due()) is not None:
                self.jumps += 1
                self.advance(wait)


def new_id() -> str:
    """A random id for rows people see in URLs (conversations, runs)."""
    return secrets.token_hex(12)


def unguessable_id() -> str:
    """An id that authorizes something when presented (approval buttons): 128 random bits."""
    return secrets.token_urlsafe(16)
