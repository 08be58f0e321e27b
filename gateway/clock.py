"""Time, injectable: expiry and pacing read a Clock so tests move time instead of sleeping."""

from __future__ import annotations

import asyncio
import secrets
import time
from datetime import datetime, timedelta, timezone


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Clock:
    """Wall time for records, monotonic time for pacing."""

    def now(self) -> datetime:
        return utcnow()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` of this clock's time (a wait paced by the clock, not a timeout)."""
        await asyncio.sleep(seconds)


class ManualClock(Clock):
    """A clock a test advances by hand; `sleep` ends when `advance` has moved past it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or utcnow()
        self._mono = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        sleeper = (self._mono + seconds, asyncio.get_running_loop().create_future())
        self._sleepers.append(sleeper)
        try:
            await sleeper[1]
        finally:
            self._sleepers.remove(sleeper)

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds
        for due, woken in self._sleepers:
            if due <= self._mono and not woken.done():
                woken.set_result(None)


def new_id() -> str:
    """A random id for rows people see in URLs (conversations, runs)."""
    return secrets.token_hex(12)


def unguessable_id() -> str:
    """An id that authorizes something when presented (approval buttons): 128 random bits."""
    return secrets.token_urlsafe(16)
