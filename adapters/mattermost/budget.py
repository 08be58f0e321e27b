"""Mattermost's rate limit, learned from the server: each server sets its own (System Console >
Rate Limiting: `PerSec`, `MaxBurst`), and states it on every REST answer.

The server limits with GCRA (the `throttled` library): a burst of `MaxBurst + 1` calls, refilled
at `PerSec` a second. Every answer carries `X-Ratelimit-Limit` (the burst), `X-Ratelimit-Remaining`
(calls left in it once this one is counted) and `X-Ratelimit-Reset` (whole seconds, rounded up,
until the burst is full again).

So unlike Slack's and Telegram's published budgets (`gateway.outbound.budget.Pacer` paces by fixed rules),
this follows the server's own count: the calls believed left are spent one per call; each answer
can only lower them (to what it says is left, minus the calls still in flight, which it may not
have counted yet: so another client of the same limit is accounted for too); when none are left,
calls wait until the moment the latest answer said the burst is full again. Waiting for a full
burst rather than guessing the refill rate paces a little under the server's rate (the reset is
rounded up), never over it. Before the first answer one call goes at a time.

Its time is the gateway's `Clock` (monotonic time, and `call_later` for the wait until the burst is
full), as the `Pacer`'s is: a test's clock decides when a wait ends.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping

from gateway.clock import Clock


class ServerLimit:
    """`async with limit.call() as answered:` around each REST call; `answered(headers)` with the
    answer's headers (a 429's too)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock = clock or Clock()
        self.limit: int | None = None  # X-Ratelimit-Limit: the burst (None: not known yet)
        self.enforced = True  # False once the server answered without limit headers (rate limiting off)
        self._left: int | None = None  # calls believed left in the burst
        self._full_at = 0.0  # when the latest answer said the burst is full again
        self.in_flight = 0  # calls sent and not answered yet (a test's clock does not jump under them)
        # Calls waiting for an answer or their moment, in the order they came (woken in that order).
        self._waiting: dict[asyncio.Future[None], None] = {}
        self.waited = 0.0  # seconds calls spent waiting for the limit

    def call(self) -> _Call:
        return _Call(self)

    async def _acquire(self) -> None:
        # No lock: nothing awaits between a check and what it decides, and every wait re-checks.
        started = self._clock.monotonic()
        while self.enforced:
            if self._left is None:  # nothing known yet: one call at a time until an answer says
                if self.in_flight == 0:
                    break
                await self._changed(None)
                continue
            now = self._clock.monotonic()
            if self._left <= 0 and now >= self._full_at and self.limit is not None:
                self._left = self.limit - self.in_flight  # the server said it would be full by now
            if self._left > 0:
                self._left -= 1
                break
            await self._changed(max(self._full_at - now, 0.01))  # until the burst is full again
        self.in_flight += 1
        self.waited += self._clock.monotonic() - started

    async def _changed(self, seconds: float | None) -> None:
        """Until an answer changes what is known, or `seconds` of the clock's time have passed."""
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[woken] = None
        timer = None if seconds is None else self._clock.call_later(
            seconds, lambda: woken.done() or woken.set_result(None))
        try:
            await woken
        finally:
            self._waiting.pop(woken, None)
            if timer is not None:
                timer.cancel()

    def _answered(self, headers: Mapping[str, str] | None) -> None:
        self.in_flight -= 1
        if headers is not None:
            self._learn(headers)
        for woken in self._waiting:
            if not woken.done():
                woken.set_result(None)

    def _learn(self, headers: Mapping[str, str]) -> None:
        limit, remaining, reset = (_number(headers.get(h)) for h in
                                   ("X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"))
        if limit is None or remaining is None or limit < 1:
            if self.limit is None:
                self.enforced = False  # this server does not limit (or does not say): nothing to pace
            return
        self.enforced = True
        self.limit = int(limit)
        left = int(remaining) - self.in_flight
        self._left = left if self._left is None else min(self._left, left)
        if reset is not None:
            self._full_at = max(self._full_at, self._clock.monotonic() + reset)


class _Call:
    def __init__(self, limit: ServerLimit) -> None:
        self._limit = limit
        self._headers: Mapping[str, str] | None = None

    def answered(self, headers: Mapping[str, str]) -> None:
        self._headers = headers

    async def __aenter__(self) -> _Call:
        await self._limit._acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._limit._answered(self._headers)


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


__all__ = ["ServerLimit"]
