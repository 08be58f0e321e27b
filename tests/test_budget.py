"""The pacer keeps calls a platform window apart even when the event loop falls behind.

Found by bench/streaming.py at 500 conversations: with the loop seconds late, calls reserved for
successive windows all woke at once and reached Telegram in the same second (five 429s).
"""

from __future__ import annotations

import asyncio
import time

from gateway.budget import Pacer, Rule

RULE = Rule("chat", 1, 0.2)  # one call per 0.2 s, per key


async def test_calls_that_wake_late_together_still_go_a_window_apart() -> None:
    pacer = Pacer()
    sent: list[float] = []

    async def call() -> None:
        async with pacer.paced([(RULE, "c1")]):
            sent.append(time.monotonic())

    first = asyncio.create_task(call())
    await first  # goes at once
    waiting = [asyncio.create_task(call()) for _ in range(3)]  # reserved one window apart each
    await asyncio.sleep(0)  # all three have reserved and sleep
    time.sleep(0.9)  # the loop is busy past all three slots: they wake together
    await asyncio.gather(*waiting)

    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert len(sent) == 4
    assert all(gap >= RULE.per for gap in gaps), gaps


async def test_a_call_on_time_goes_on_its_slot() -> None:
    pacer = Pacer()
    sent: list[float] = []

    async def call() -> None:
        async with pacer.paced([(RULE, "c1")]):
            sent.append(time.monotonic())

    await asyncio.gather(*(call() for _ in range(3)))
    gaps = [b - a for a, b in zip(sent, sent[1:], strict=False)]
    assert all(gap >= RULE.per for gap in gaps), gaps
