"""Staying connected: backoff with jitter, a health flag, and the reconnect loop.

The core owns these because both adapters (platform connections) and the MCP pool (tool
servers) use them; `adapters/base.py` builds the shared adapter lifecycle on top.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from gateway.outbound.adapter import AdapterHealth


class Backoff:
    """Exponential backoff with full jitter, for reconnect loops."""

    def __init__(self, base: float = 0.5, cap: float = 60.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next_delay(self) -> float:
        delay = random.uniform(0, min(self.cap, self.base * 2**self.attempt))
        self.attempt += 1
        return delay

    def reset(self) -> None:
        self.attempt = 0


class HealthState:
    """Connection state an adapter updates and `/readyz` reads."""

    def __init__(self) -> None:
        self._health = AdapterHealth(connected=False, detail="starting", since=_now())

    def up(self, detail: str = "connected") -> None:
        self._health = AdapterHealth(connected=True, detail=detail, since=_now())

    def down(self, detail: str) -> None:
        self._health = AdapterHealth(connected=False, detail=detail, since=_now())

    def get(self) -> AdapterHealth:
        return self._health


async def reconnect_forever(
    connect_once: Callable[[], Awaitable[None]],
    health: HealthState,
    log: logging.Logger,
    *,
    backoff: Backoff | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Run `connect_once` until cancelled; after it returns or fails, wait with jitter and retry.

    `connect_once` should call `health.up()` once connected; the backoff resets after a
    connection that came up.
    """
    backoff = backoff or Backoff()
    while True:
        try:
            await connect_once()
            reason = "disconnected"
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a dropped connection is routine: log it and try again
            reason = f"{type(e).__name__}: {e}"
            log.warning("connection lost: %s", e)
        # A connection that stayed up a while earns a fast reconnect; read before down() resets `since`.
        before = health.get()
        if before.connected and before.since and (_now() - before.since).total_seconds() > 30:
            backoff.reset()
        health.down(reason)
        await sleep(backoff.next_delay())


def _now() -> datetime:
    return datetime.now(timezone.utc)
