"""The pacer keeps calls a platform window apart even when the event loop falls behind, and a
call woken late keeps its place in the queue.

Found by bench/streaming.py at 500 conversations (calls reserved for successive windows woke
together and reached Telegram in the same second) and by a loaded CI machine (a 30-message
burst into one group met a 429 from the fake).

The pacer runs on a `ManualClock` that jumps to the next wait by itself (`autojump`); a loop that
falls behind is the clock advanced past several waits at once.
"""

from __future__ import annotations

import asyncio

import pytest

from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.outbound.budget import Pacer, Rule
from adapters.telegram.budget import PER_CHAT, TelegramBudget

RULE = Rule("chat", 1, 0.2)  # one call per 0.2 s, per key
GROUP_ID = -100200  # a Telegram group (negative): its sends count against the chat, the group and the bot


class Calls:
    """A pacer on a clock that jumps to the next wait, and the calls made through it, in order."""

    def __init__(self) -> None:
        self.clock = ManualClock(autojump=AUTOJUMP)
        self.pacer = Pacer(clock=self.clock)
        self.sent: list[tuple[int, float]] = []  # (call, when it went, on the clock)

    async def start(self, n: int, first: int = 0) -> list[asyncio.Task[None]]:
        async def call(i: int) -> None:
            async with self.pacer.paced([(RULE, "c1")]):
                self.sent.append((i, self.clock.monotonic()))

        tasks = [asyncio.create_task(call(first + i)) for i in range(n)]
        await asyncio.sleep(0)  # each has reserved its slot
        return tasks

    def gaps(self) -> list[float]:
        times = sorted(t for _, t in self.sent)
        return [b - a for a, b in zip(times, times[1:], strict=False)]


async def test_calls_that_wake_late_together_still_go_a_window_apart() -> None:
    c = Calls()
    await asyncio.gather(*await c.start(1))  # goes at once
    waiting = await c.start(3, first=1)  # reserved a window apart each
    c.clock.advance(0.9)  # the loop is busy past all three slots: they wake together
    await asyncio.gather(*waiting)
    assert len(c.sent) == 4
    assert all(gap >= RULE.per for gap in c.gaps()), c.gaps()


@pytest.mark.parametrize("stall", [0.5, 0.6])
async def test_a_call_woken_late_goes_before_the_calls_reserved_after_it(stall: float) -> None:
    """At 0.6 s the third call's reserved moment (two windows in, 0.54 s) has passed too when the
    second wakes: it is still behind the second, so the second does not wait for it. (A loaded
    machine's lag once turned 0.5 into this and sent the second call last.)"""
    c = Calls()
    early = await c.start(3)
    c.clock.advance(stall)  # the loop stalls: the second and third wake late
    later = await c.start(3, first=3)  # reserved after them
    await asyncio.gather(*early, *later)
    assert [i for i, _ in c.sent] == list(range(6))  # nobody overtaken
    assert all(gap >= RULE.per for gap in c.gaps()), c.gaps()


async def test_a_call_on_time_goes_on_its_slot() -> None:
    c = Calls()
    await asyncio.gather(*await c.start(3))
    assert all(gap >= RULE.per for gap in c.gaps()), c.gaps()
    assert c.clock.jumps == 2, "each call after the first waited for its slot"


async def test_a_call_that_overslept_its_window_still_keeps_a_window_from_a_newcomer() -> None:
    c = Calls()
    await asyncio.gather(*await c.start(1))  # A goes at once
    waiting = await c.start(1, first=1)  # B: a window later
    c.clock.advance(1.0)  # the loop stalls past B's whole window (B's entry is now older than any window)
    newcomer = await c.start(1, first=2)  # C takes its slot before B wakes
    await asyncio.gather(*waiting, *newcomer)
    assert all(gap >= RULE.per for gap in c.gaps()), c.gaps()


# Moments on the clock where the float sum e + w, less w, comes out below e (found by trying random
# moments): the pacer then counted the chat's last call inside its own window at the moment it ends.
LOSSY_MOMENTS = [7.253398, 2.07155, 1.774498, 2.609237]


@pytest.mark.parametrize("start", LOSSY_MOMENTS + [1.0, 15.1])
async def test_a_second_message_in_a_group_waits_for_its_chat_not_for_the_groups_minute(start: float) -> None:
    """Telegram: a message a moment after another in one group waits out the chat's second (one a
    second), not the group's minute (twenty a minute, far from full). At some moments it waited the
    minute: a Stop button stayed under a finished reply for a minute, and a test's clock, jumping
    over that wait, ran an every-minute schedule twice (tests/adapters/telegram/test_e2e_schedules.py)."""
    clock = ManualClock()
    pacer, budget = Pacer(clock=clock), TelegramBudget()
    clock.advance(start)
    async with pacer.paced(budget.message(GROUP_ID)):
        pass  # the first goes at once
    second = asyncio.create_task(pacer.take(budget.message(GROUP_ID)))
    await asyncio.sleep(0)  # it has reserved its moment and sleeps until then
    try:
        assert clock.next_due() == pytest.approx(pacer.window(PER_CHAT))
    finally:
        second.cancel()
