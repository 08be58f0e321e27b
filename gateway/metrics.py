"""Prometheus metrics, one registry per gateway (so tests running several gateways don't collide)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from .runner import Turn


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.messages_in = Counter("gateway_messages_in", "Messages received", ["platform", "outcome"], registry=r)
        self.messages_out = Counter("gateway_messages_out", "Replies finished", ["platform"], registry=r)
        self.runs = Counter("gateway_runs", "Runs by outcome", ["platform", "outcome"], registry=r)
        self.duplicates = Counter("gateway_inbound_duplicates", "Redeliveries dropped by the ledger", ["platform"], registry=r)
        self.run_seconds = Histogram("gateway_run_duration_seconds", "Run wall-clock time", ["platform"], registry=r)
        self.queue_depth = Gauge("gateway_conversations_active", "Conversations with a worker", registry=r)
        self.approvals_pending = Gauge("gateway_approvals_pending", "Approvals waiting for a decision", registry=r)
        self.platform_errors = Counter(
            "gateway_platform_errors", "Platform API errors", ["platform", "kind"], registry=r
        )
        self.tokens = Counter("gateway_model_tokens", "Model tokens", ["direction"], registry=r)
        # A leak of tasks shows here first (bench/chaos.py's soak samples it).
        Gauge("gateway_asyncio_tasks", "Tasks alive in the daemon's event loop", registry=r).set_function(_tasks)

    def run_ended(self, turn: Turn, outcome: str) -> None:
        self.runs.labels(turn.conversation.platform, outcome).inc()
        if outcome == "finished":
            self.messages_out.labels(turn.conversation.platform).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _tasks() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # rendered outside the loop
        return 0.0
