"""Prometheus metrics, one registry per gateway (so tests running several gateways don't collide)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from gateway.runs.runner import Turn


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
        self.slow_tool_calls = Counter("gateway_slow_tool_calls", "Tool calls that took at least "
                                       "limits.slow_tool_seconds, by stable tool id", ["tool", "failed"], registry=r)
        self.tokens = Counter("gateway_model_tokens", "Model tokens", ["direction"], registry=r)
        # A leak of tasks shows here first (bench/chaos.py's soak samples it).
        Gauge("gateway_asyncio_tasks", "Tasks alive in the daemon's event loop", registry=r).set_function(_tasks)
        # How late a timer fires: the time every callback waits behind a busy loop (bench/streaming.py
        # reads its p99). Buckets fine at the low end, where a healthy loop lives.
        self.loop_lag = Histogram("gateway_event_loop_lag_seconds", "How late the event loop ran a timer",
                                  buckets=LAG_BUCKETS, registry=r)
        self._lag_probe: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the loop-lag probe (in the running loop)."""
        if self._lag_probe is None:
            self._lag_probe = asyncio.create_task(_probe_lag(self.loop_lag), name="gateway:loop-lag")

    async def stop(self) -> None:
        if self._lag_probe is not None:
            self._lag_probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lag_probe
            self._lag_probe = None

    def run_ended(self, turn: Turn, outcome: str) -> None:
        self.runs.labels(turn.conversation.platform, outcome).inc()
        if outcome == "finished":
            self.messages_out.labels(turn.conversation.platform).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


LAG_EVERY = 0.05  # seconds between probes: 20 cheap wake-ups a second
LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


async def _probe_lag(histogram: Histogram) -> None:
    """Sleep LAG_EVERY, observe how much later than asked the loop woke us (the lag every
    callback queued at that moment saw too)."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time() + LAG_EVERY
        await asyncio.sleep(LAG_EVERY)
        histogram.observe(max(0.0, loop.time() - asked))


def _tasks() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # rendered outside the loop
        return 0.0
