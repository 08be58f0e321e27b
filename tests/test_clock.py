"""The manual clock: what a test moves instead of waiting. Its timers run when it passes them, in
order, never before; with `autojump` it moves itself to the next one once left alone."""

from __future__ import annotations

import asyncio

import pytest

from gateway.clock import ManualClock


async def _turns(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_advance_runs_the_timers_it_passes_in_order_and_no_others() -> None:
    clock, ran = ManualClock(), []
    clock.call_later(2.0, lambda: ran.append(("b", clock.monotonic())))
    clock.call_later(1.0, lambda: ran.append(("a", clock.monotonic())))
    late = clock.call_later(5.0, lambda: ran.append(("late", clock.monotonic())))
    clock.advance(1.5)
    assert ran == [], "a timer runs on the loop, as asyncio's do, never inside advance()"
    await _turns()
    assert ran == [("a", 1.5)]
    clock.advance(1.0)
    late.cancel()
    clock.advance(10.0)
    await _turns()
    assert [name for name, _ in ran] == ["a", "b"] and clock.next_due() is None


async def test_a_timer_cancelled_after_it_came_due_does_not_run() -> None:
    clock, ran = ManualClock(), []
    timer = clock.call_later(1.0, lambda: ran.append(1))
    clock.advance(1.0)
    timer.cancel()  # before the loop's turn came (a stream closed by the same step)
    await _turns()
    assert ran == []


async def test_a_sleep_ends_when_the_clock_passes_it_and_a_cancelled_one_leaves_no_timer() -> None:
    clock = ManualClock()
    sleeping = asyncio.create_task(clock.sleep(3.0))
    await _turns()
    clock.advance(2.9)
    await _turns()
    assert not sleeping.done() and clock.next_due() == pytest.approx(0.1)
    clock.advance(0.1)
    await asyncio.wait_for(sleeping, 5)
    cancelled = asyncio.create_task(clock.sleep(1.0))
    await _turns()
    cancelled.cancel()
    await asyncio.gather(cancelled, return_exceptions=True)
    assert clock.next_due() is None
    assert clock.monotonic() == 3.0 and clock.jumps == 0, "without autojump, only advance() moves it"


async def test_autojump_moves_to_each_next_wait_and_never_past_it() -> None:
    clock = ManualClock(autojump=0.001)
    woke: list[float] = []

    async def sleeper(seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append(clock.monotonic())

    await asyncio.wait_for(asyncio.gather(sleeper(30.0), sleeper(10.0), sleeper(60.0)), 5)
    assert woke == [10.0, 30.0, 60.0] and clock.jumps == 3


async def test_autojump_waits_while_something_keeps_using_the_clock() -> None:
    """Code reading the clock is still at work: the clock does not jump under it. (A task that only
    yields, `sleep(0)`, is always ahead of the jump's timer in the loop's queue: no race.)"""
    clock = ManualClock(autojump=0.001)
    sleeping = asyncio.create_task(clock.sleep(10.0))
    loop = asyncio.get_running_loop()
    busy_until = loop.time() + 0.05  # fifty times the autojump's threshold
    while loop.time() < busy_until:  # a step that reads the clock as it goes
        clock.monotonic()
        await asyncio.sleep(0)
    assert not sleeping.done() and clock.jumps == 0
    await asyncio.wait_for(sleeping, 5)  # left alone, it jumps
    assert clock.monotonic() == 10.0 and clock.jumps == 1
