"""The daemon's pruning job: off the hot path, from the sweep loop, at most every `every_minutes`."""

from __future__ import annotations

import logging

from bindings.models import RetentionConfig

from gateway.clock import Clock
from gateway.store.repo import Store
from gateway.store.retention import Retention, prune

log = logging.getLogger(__name__)


def retention_of(config: RetentionConfig) -> Retention:
    return Retention(ledger_days=config.ledger_days, deliveries_days=config.deliveries_days,
                     runs_days=config.runs_days, batch=config.batch)


class Pruning:
    def __init__(self, store: Store, config: RetentionConfig, clock: Clock) -> None:
        self.store, self.config, self.clock = store, config, clock
        self._next = clock.monotonic()  # the first sweep after start prunes

    async def when_due(self) -> dict[str, int] | None:
        if self.clock.monotonic() < self._next:
            return None
        self._next = self.clock.monotonic() + self.config.every_minutes * 60
        deleted = await prune(self.store, retention_of(self.config), self.clock.now())
        if any(deleted.values()):
            log.info("pruned %s", ", ".join(f"{n} {table} rows" for table, n in deleted.items() if n))
        return deleted
