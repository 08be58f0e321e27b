#!/usr/bin/env python3
"""What a loop timer costs, and whether one shared timer per loop standing for many moments pays.

bench/wakeups.py counts the timers a message sets (Round 16: ~15 in a Slack burst, ~6 of them the
gateway's). This prices one in the loop thread's CPU: asyncio's own (`loop.call_later`, a TimerHandle
in the loop's heap) against a prototype of a Clock-level shared timer (one TimerHandle for the earliest
moment, a heap of the rest), each set `--concurrent` at a time as a burst's runs hold them, half
cancelled before they come due (a draft timer the final answer overtook), half run. Interleaved
A B B A, `--rounds` rounds; the loop thread's CPU per timer (set, and then run or cancelled).

    .venv/bin/python bench/timers.py
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import itertools
import statistics
import time
from collections.abc import Callable


class _Shared:
    """The prototype: one loop timer for the earliest of many moments."""

    __slots__ = ("due", "order", "callback", "cancelled")

    def __init__(self, due: float, order: int, callback: Callable[[], object]) -> None:
        self.due, self.order, self.callback, self.cancelled = due, order, callback, False

    def cancel(self) -> None:
        self.cancelled = True

    def __lt__(self, other: _Shared) -> bool:
        return (self.due, self.order) < (other.due, other.order)


class SharedTimers:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[_Shared] = []
        self.order = itertools.count()
        self.handle: asyncio.TimerHandle | None = None
        self.armed = float("inf")

    def call_later(self, seconds: float, callback: Callable[[], object]) -> _Shared:
        timer = _Shared(self.loop.time() + seconds, next(self.order), callback)
        heapq.heappush(self.heap, timer)
        if timer.due < self.armed:
            self._arm(timer.due)
        return timer

    def _arm(self, due: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.armed = due
        self.handle = self.loop.call_at(due, self._fire)

    def _fire(self) -> None:
        self.handle, self.armed = None, float("inf")
        now = self.loop.time()
        while self.heap and (self.heap[0].cancelled or self.heap[0].due <= now):
            timer = heapq.heappop(self.heap)
            if not timer.cancelled:
                timer.callback()
        if self.heap:
            self._arm(self.heap[0].due)


async def one_side(kind: str, timers: int, concurrent: int) -> float:
    """The loop thread's CPU ns per timer: `concurrent` held at once, every other one cancelled."""
    loop = asyncio.get_running_loop()
    shared = SharedTimers(loop)
    set_later = loop.call_later if kind == "asyncio" else shared.call_later
    ran = 0
    done = loop.create_future()

    def fired() -> None:
        nonlocal ran
        ran += 1
        if ran == timers // 2:
            done.set_result(None)

    t0 = time.thread_time_ns()
    held: list[asyncio.TimerHandle | _Shared] = []
    for i in range(timers):
        # Moments 1-20 ms ahead, out of order (drafts, acks, timeouts of runs started at different times).
        timer = set_later(0.001 + (i * 7919 % 20) / 1000, fired if i % 2 == 0 else _never)
        held.append(timer)
        if len(held) >= concurrent:
            for t in held[1::2]:
                t.cancel()  # the odd ones: cancelled before they come due
            held.clear()
            await asyncio.sleep(0)
    for t in held[1::2]:
        t.cancel()
    await done
    return (time.thread_time_ns() - t0) / timers


def _never() -> None:
    raise AssertionError("a cancelled timer ran")


async def main(args: argparse.Namespace) -> None:
    results: dict[str, list[float]] = {"asyncio": [], "shared": []}
    for r in range(args.rounds):
        for kind in ("asyncio", "shared") if r % 2 == 0 else ("shared", "asyncio"):
            results[kind].append(await one_side(kind, args.timers, args.concurrent))
    print(f"| {args.timers} timers, {args.concurrent} held at once, half cancelled | CPU ns per timer, median (min-max) |")
    print("| --- | --- |")
    for kind, values in results.items():
        print(f"| {kind} | {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f}) |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timers", type=int, default=100_000)
    parser.add_argument("--concurrent", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6)
    asyncio.run(main(parser.parse_args()))
