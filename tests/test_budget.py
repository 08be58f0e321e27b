"""The pacer keeps calls a platform window apart even when the event loop falls behind, and a
call woken late keeps its place in the queue.

Found by bench/streaming.py at 500 conversations (calls reserved for successive windows woke
together and reached Telegram in the same second) and by a loaded CI machine (a 30-message
burst into one group met a 429 from the fake).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from gateway.outbound.budget import Pacer, Rule

RULE = Rule("chat", 1, 0.2)  # one call per 0.2 s, per key


async def _calls(pacer: Pacer, n: int, sent: list[tuple[int, float]], first: int = 0) -> list[asyncio.Task[None]]:
    async def call(i: int) -> None:
        async with pacer.paced([(RULE, "c1")]):
            sent.append((i, time.monotonic()))

    tasks = [asyncio.create_task(call(first + i)) for i in range(n)]
    await asyncio.sleep(0)  # each has reserved its slot
    return tasks


async def test_calls_that_wake_late_together_still_go_a_window_apart() -> None:
    pacer, sent = Pacer(), []
    await asyncio.gather(*await _calls(pacer, 1, sent))  # goes at once
    waiting = await _calls(pacer, 3, sent, first=1)  # reserved a window apart each
    time.sleep(0.9)  # the loop is busy past all three slots: they wake together
    await asyncio.gather(*waiting)
    times = [t for _, t in sent]
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert len(sent) == 4
    assert all(gap >= RULE.per for gap in gaps), gaps


@pytest.mark.parametrize("stall", [0.5, 0.6])
async def test_a_call_woken_late_goes_before_the_calls_reserved_after_it(stall: float) -> None:
    """At 0.6 s the third call's reserved moment (two windows in, 0.54 s) has passed too when the
    second wakes: it is still behind the second, so the second does not wait for it. (A loaded
    machine's lag once turned 0.5 into this and sent the second call last.)"""
    pacer, sent = Pacer(), []
    early = await _calls(pacer, 3, sent)
    time.sleep(stall)  # the loop stalls: the second and third wake late
    later = await _calls(pacer, 3, sent, first=3)  # reserved after them
    await asyncio.gather(*early, *later)
    assert [i for i, _ in sent] == list(range(6))  # nobody overtaken
    times = [t for _, t in sent]
    assert all(b - a >= RULE.per for a, b in zip(times, times[1:], strict=False))


async def test_a_call_on_time_goes_on_its_slot() -> None:
    pacer, sent = Pacer(), []
    await asyncio.gather(*await _calls(pacer, 3, sent))
    times = [t for _, t in sent]
    assert all(b - a >= RULE.per for a, b in zip(times, times[1:], strict=False))


async def test_a_call_that_overslept_its_window_still_keeps_a_window_from_a_newcomer() -> None:
    pacer, sent = Pacer(), []
    await asyncio.gather(*await _calls(pacer, 1, sent))  # A goes at once
    waiting = await _calls(pacer, 1, sent, first=1)  # B: a window later
    time.sleep(1.0)  # the loop stalls past B's whole window (B's entry is now older than any window)
    newcomer = await _calls(pacer, 1, sent, first=2)  # C takes its slot before B wakes
    await asyncio.gather(*waiting, *newcomer)
    times = sorted(t for _, t in sent)
    assert all(b - a >= RULE.per for a, b in zip(times, times[1:], strict=False)), times
