#!/usr/bin/env python3
"""What the spool adds to the ack of Slack's last delivery held while the database refuses it.

`HeldEvents.take` for a burst of held events, held in memory only (no spool, as before the spool)
and spooled (`gateway.spool.Spool` in a temporary directory on the disk given), the two taking
turns by burst (A B B A ...) so both meet the same load. Per take: `time.thread_time()` of the loop
thread (the file is written in a worker thread: what the loop itself pays), and the wall time the
ack waits (the write, its fsyncs and the rename), p50 and p99; medians over the bursts.

    .venv/bin/python bench/held_spool.py --dir /var/lib/agent-gateway --rounds 4 --events 150
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path

from adapters.slack.held import HeldEvents
from adapters.slack.normalize import BotIdentity
from gateway.clock import Clock
from gateway.spool import Spool

LOG = logging.getLogger("bench.held_spool")
LOG.disabled = True  # every take logs a warning: not what is measured
BODY = {"type": "event_callback", "team_id": "T0", "event": {"type": "message", "text": "x" * 400,
                                                             "user": "U0ADA", "channel": "D0ADA", "ts": "1.000"}}


async def _never(body: object, bot: object) -> None:
    """The store: never reached within a burst (the retry is not spawned)."""


async def burst(spooled: bool, events: int, under: Path) -> tuple[float, float, float]:
    """Loop CPU per take, and the ack's wait p50 / p99, in seconds."""
    spool = Spool(Path(tempfile.mkdtemp(dir=under)) / "acme", LOG) if spooled else None
    held = HeldEvents(_never, lambda coro: coro.close(), lambda: False, Clock(), LOG, spool)
    waits = []
    cpu = time.thread_time()
    for i in range(events):
        started = time.perf_counter()
        await held.take({**BODY, "event_id": f"Ev{i}"}, BotIdentity("U0BOT"), 3)
        waits.append(time.perf_counter() - started)
    cpu = (time.thread_time() - cpu) / events
    waits.sort()
    return cpu, statistics.median(waits), waits[int(len(waits) * 0.99)]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()), help="the disk the spool is on")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--events", type=int, default=150, help="takes a burst (the bound is 200)")
    args = parser.parse_args()
    results: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(dir=args.dir) as under:
        for _ in range(args.rounds):
            for spooled in (False, True, True, False):
                results[spooled].append(await burst(spooled, args.events, Path(under)))
    for spooled, runs in results.items():
        cpu, p50, p99 = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{'spooled' if spooled else 'memory '}  loop CPU {cpu * 1e6:6.0f} us a take   "
              f"ack waits p50 {p50 * 1e3:6.2f} ms  p99 {p99 * 1e3:6.2f} ms")


if __name__ == "__main__":
    asyncio.run(main())
