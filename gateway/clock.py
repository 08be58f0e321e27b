"""Time, injectable: expiry and pacing read a Clock so tests move time instead of sleeping."""

from __future__ import annotations

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


class ManualClock(Clock):
    """A clock a test advances by hand."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or utcnow()
        self._mono = 0.0

    def now(self) -> datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)
        self._mono += seconds


def new_id() -> str:
    """A random id for rows people see in URLs (conversations, runs)."""
    return secrets.token_hex(12)


def unguessable_id() -> str:
    """An id that authorizes something when presented (approval buttons): 128 random bits."""
    return secrets.token_urlsafe(16)
