"""The inbound path's lock per conversation (`gateway.inbound.pipeline.KeyedLocks`): one holder per key
at a time, in arrival order, other keys never held up, and nothing kept once a key is free, a
waiter cancelled while it waited included."""

from __future__ import annotations

import asyncio

from gateway.inbound.pipeline import KeyedLocks


async def _hold(locks: KeyedLocks, key: str, order: list[str], name: str, release: asyncio.Event) -> None:
    async with locks.hold(key):
        order.append(f"{name} in")
        await release.wait()
        order.append(f"{name} out")


async def test_one_holder_per_key_in_arrival_order_and_nothing_kept_after() -> None:
    locks, order = KeyedLocks(), []
    gates = [asyncio.Event() for _ in range(3)]
    tasks = [asyncio.create_task(_hold(locks, "c1", order, n, g)) for n, g in zip("abc", gates)]
    await asyncio.sleep(0.01)
    assert order == ["a in"]
    for gate in reversed(gates):  # released in any order, they still pass in the order they came
        gate.set()
    await asyncio.gather(*tasks)
    assert order == ["a in", "a out", "b in", "b out", "c in", "c out"]
    assert locks._locks == {}


async def test_another_key_is_not_held_up() -> None:
    locks, order = KeyedLocks(), []
    held = asyncio.Event()
    first = asyncio.create_task(_hold(locks, "c1", order, "a", held))
    await asyncio.sleep(0)
    async with locks.hold("c2"):
        order.append("other key")
    assert order == ["a in", "other key"]
    held.set()
    await first
    assert locks._locks == {}


async def test_a_waiter_cancelled_while_waiting_never_holds_and_the_next_one_does() -> None:
    locks, order = KeyedLocks(), []
    gates = [asyncio.Event() for _ in range(3)]
    tasks = [asyncio.create_task(_hold(locks, "c1", order, n, g)) for n, g in zip("abc", gates)]
    await asyncio.sleep(0.01)
    tasks[1].cancel()
    await asyncio.wait([tasks[1]])
    for gate in gates:
        gate.set()
    await asyncio.gather(tasks[0], tasks[2])
    assert order == ["a in", "a out", "c in", "c out"]
    assert locks._locks == {}


async def test_a_holder_that_raises_frees_its_key() -> None:
    locks = KeyedLocks()
    try:
        async with locks.hold("c1"):
            raise ValueError("the message failed")
    except ValueError:
        pass
    assert locks._locks == {}
    async with locks.hold("c1"):  # free again
        pass
