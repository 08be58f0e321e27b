"""Prometheus metrics, one registry per gateway (so tests running several gateways don't collide).

Every name is prefixed `agent_gateway_`. The names before it (`gateway_…`) are still exported,
for one release, as aliases (`_Aliases`): the same series summed over the labels added since
(`agent`, `binding`), so a dashboard or alert written against them keeps its meaning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from prometheus_client import (CollectorRegistry, Counter, Gauge, Histogram, PlatformCollector, ProcessCollector,
                               generate_latest)
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric

from gateway import version

from gateway.ops.loop_watchdog import LoopWatchdog

if TYPE_CHECKING:
    from gateway.runs.runner import Turn

M = TypeVar("M", bound=MetricWrapperBase)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        aliases = _Aliases()
        r.register(aliases)
        # The process's own series (resident memory, open file descriptors, CPU seconds, start time)
        # and the Python build, on this registry rather than the global one.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        Gauge("agent_gateway_build_info", "The running version (always 1)", ["version", "python"],
              registry=r).labels(version.version(), version.python()).set(1)
        # Counted on every message (`Children`: each label set's child looked up once).
        self.messages_in = Children(aliases.add(Counter(f"{PREFIX}messages_in", "Messages received",
                                                        ["platform", "outcome"], registry=r)))
        self.messages_out = Children(aliases.add(Counter(f"{PREFIX}messages_out", "Replies finished", ["platform"],
                                                         registry=r)))
        self.runs = Children(aliases.add(Counter(f"{PREFIX}runs", "Runs by outcome",
                                                 ["platform", "outcome", "agent", "binding"], registry=r),
                                         old=("platform", "outcome")))
        self.duplicates = Children(aliases.add(Counter(f"{PREFIX}inbound_duplicates",
                                                       "Redeliveries dropped by the ledger", ["platform"], registry=r)))
        self.run_seconds = Children(aliases.add(Histogram(f"{PREFIX}run_duration_seconds", "Run wall-clock time",
                                                          ["platform", "agent", "binding"], buckets=RUN_BUCKETS,
                                                          registry=r), old=("platform",)))
        self.queue_depth = aliases.add(Gauge(f"{PREFIX}conversations_active", "Conversations with a worker",
                                             registry=r))
        # Notices, command answers and codes still being sent (a stop drains them; tests wait for 0).
        # New, so no `gateway_` alias.
        self.outbound_pending = Gauge(f"{PREFIX}outbound_pending", "Messages the gateway is still sending on its own",
                                      registry=r)
        self.approvals_pending = aliases.add(Gauge(f"{PREFIX}approvals_pending", "Approvals waiting for a decision",
                                                   registry=r))
        self.platform_errors = aliases.add(Counter(f"{PREFIX}platform_errors", "Platform API errors",
                                                   ["platform", "kind"], registry=r))
        self.slow_tool_calls = aliases.add(Counter(f"{PREFIX}slow_tool_calls", "Tool calls that took at least "
                                                   "limits.slow_tool_seconds, by stable tool id", ["tool", "failed"],
                                                   registry=r))
        self.tokens = Children(aliases.add(Counter(f"{PREFIX}model_tokens", "Model tokens", ["direction"], registry=r)))
        # Media other models made for a run (images drawn, clips transcribed, speech spoken) and what it
        # cost where the model's price is known: priced apart from the tokens above, one family per figure
        # with the kind as a label (gateway/store/run_costs.py). New: no `gateway_` alias.
        media = ["kind", "model", "agent"]
        self.media_requests = Counter(f"{PREFIX}media_requests", "Requests to media models (image, transcription, "
                                      "speech); priced=no where the model has no known price", [*media, "priced"],
                                      registry=r)
        self.media_amount = Counter(f"{PREFIX}media_amount", "What media models made, in the kind's unit: images, "
                                    "seconds (transcription), characters (speech)", [*media, "unit"], registry=r)
        self.media_cost = Counter(f"{PREFIX}media_cost_usd", "What media models' requests cost, in US dollars "
                                  "(priced models only)", media, registry=r)
        # New since the rename: no old name to alias.
        self.schedule_occurrences = Counter(f"{PREFIX}schedule_occurrences", "Scheduled tasks' occurrences: fired "
                                            "(queued to run), missed (skipped or collapsed after an outage), failed "
                                            "(could not fire: access lost, binding gone)", ["outcome"], registry=r)
        # A leak of tasks shows here first (bench/chaos.py's soak samples it).
        tasks = Gauge(f"{PREFIX}asyncio_tasks", "Tasks alive in the daemon's event loop", registry=r)
        tasks.set_function(_tasks)
        aliases.add(tasks)
        # How late a timer fires: the time every callback waits behind a busy loop (bench/streaming.py
        # reads its p99). Buckets fine at the low end, where a healthy loop lives.
        # The watchdog's beat (a 50 ms timer) is observed here too: the lag is how late each beat ran,
        # and the watchdog names the task of each stall.
        self.loop_lag = aliases.add(Histogram(f"{PREFIX}event_loop_lag_seconds", "How late the event loop ran a timer",
                                              buckets=LAG_BUCKETS, registry=r))
        self.loop_stalls = Counter(f"{PREFIX}event_loop_stalls", "Event-loop stalls over 250 ms (each logged "
                                   "with its task)", registry=r)
        self.watchdog = LoopWatchdog(on_stall=lambda seconds: self.loop_stalls.inc(), on_beat=self.loop_lag.observe)

    def start(self) -> None:
        """Start the stall watchdog, whose beats the lag histogram observes (in the running loop)."""
        self.watchdog.start()

    async def stop(self) -> None:
        self.watchdog.stop()

    def run_ended(self, turn: Turn, outcome: str) -> None:
        self.runs.labels(turn.conversation.platform, outcome, turn.agent.id, turn.binding.id).inc()
        if outcome == "finished":
            self.messages_out.labels(turn.conversation.platform).inc()

    def run_took(self, turn: Turn, seconds: float) -> None:
        self.run_seconds.labels(turn.target.platform, turn.agent.id, turn.binding.id).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class Children(Generic[M]):
    """A labelled metric's children, each label set's looked up once: prometheus_client's `labels`
    converts and checks the values and takes the metric's lock on every call, and these are counted
    on every message. Holds no more than the metric does (it keeps every child it made)."""

    def __init__(self, metric: M) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], M] = {}

    def labels(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self.metric.labels(*values)
        return child

    def __getattr__(self, name: str) -> Any:
        # It stands where the metric stood: reading it (`collect`, `describe`) reaches the metric.
        return getattr(self.metric, name)


PREFIX = "agent_gateway_"
OLD_PREFIX = "gateway_"  # the names of 0.1.0, exported as aliases for one release
# Runs take from a second (a short answer) to minutes (tools, delegations, `limits` allow 300 s and
# more): the default buckets stop at 10 s, where every long run would look alike.
RUN_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 180.0, 300.0, 450.0, 600.0)


class _Aliases:
    """Collects, under the old `gateway_` names, the metrics `add`ed to it: each family's samples
    summed over the labels the old name did not have (`le` kept). Registered on the same registry;
    it has no `describe`, so it claims no names there."""

    def __init__(self) -> None:
        self._metrics: list[tuple[MetricWrapperBase, tuple[str, ...] | None]] = []

    def add(self, metric: M, old: tuple[str, ...] | None = None) -> M:
        """`old`: the label names the old series had (None: the same as now)."""
        self._metrics.append((metric, old))
        return metric

    def collect(self) -> Iterator[Metric]:
        for metric, old in self._metrics:
            for family in metric.collect():
                alias = Metric(OLD_PREFIX + family.name.removeprefix(PREFIX), family.documentation, family.type)
                sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
                for sample in family.samples:
                    if sample.name.endswith("_created"):
                        continue  # a creation time cannot be summed; the old series go without it
                    keep = old if old is not None else tuple(sample.labels)
                    labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k in keep or k == "le"))
                    key = (OLD_PREFIX + sample.name.removeprefix(PREFIX), labels)
                    sums[key] = sums.get(key, 0.0) + sample.value
                for (name, labels), value in sums.items():
                    alias.add_sample(name, dict(labels), value)
                yield alias


LAG_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def _tasks() -> float:
    try:
        return float(len(asyncio.all_tasks()))
    except RuntimeError:  # rendered outside the loop
        return 0.0
