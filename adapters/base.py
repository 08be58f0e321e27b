"""The adapter registry and the helpers every adapter shares.

The protocol itself lives in `gateway.surface` (the core owns the interface it talks to).
Adapters are registered by platform name as import paths, so starting the daemon imports an
SDK only for the platforms a config actually binds.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from bindings.models import BindingSpec, GatewayConfig
from gateway.surface import Adapter, AdapterHealth

_REGISTRY: dict[str, str] = {
    "web": "adapters.web.adapter:WebAdapter",
    "slack": "adapters.slack.adapter:SlackAdapter",
    "telegram": "adapters.telegram.adapter:TelegramAdapter",
    "mattermost": "adapters.mattermost.adapter:MattermostAdapter",
}


@dataclass(frozen=True)
class AdapterContext:
    """What an adapter is built with besides its own binding."""

    gateway: GatewayConfig
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("adapters"))


def register(platform: str, path: str) -> None:
    """Register (or replace) the adapter class for `platform` as 'module:Class'."""
    _REGISTRY[platform] = path


def create_adapter(binding: BindingSpec, context: AdapterContext) -> Adapter:
    try:
        path = _REGISTRY[binding.platform]
    except KeyError:
        raise LookupError(f"no adapter registered for platform {binding.platform!r}") from None
    module_name, _, class_name = path.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(binding, context)


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
