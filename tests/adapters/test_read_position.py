"""The read position (Telegram's update offset, Mattermost's stream position) is saved off the
event path: a store write that hangs never holds up the next event, and saves are paced by the
gateway's clock, with what is left written at stop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from adapters.read_position import ReadPosition
from gateway.clock import ManualClock
from tests.conftest import wait_for
from tests.fakes.telegram import FakeTelegram
from tests.support.dispatcher import FakeDispatcher

from .mattermost.conftest import BOT_TOKEN, World, world  # noqa: F401 - the fixture
from .mattermost.helpers import make_adapter as make_mattermost
from .telegram.test_adapter import ADA, fake  # noqa: F401 - the fixture
from .telegram.test_adapter import make_adapter as make_telegram

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")


class StuckStore(FakeDispatcher):
    """A store whose writes of `key` hang until `release` is set."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key, self.writing, self.release = key, asyncio.Event(), asyncio.Event()

    async def set_state(self, binding_id: str, key: str, value: str) -> None:
        if key.startswith(self.key):
            self.writing.set()
            await self.release.wait()
        await super().set_state(binding_id, key, value)


async def test_a_hung_offset_write_never_holds_up_the_next_telegram_update(
        fake: FakeTelegram, monkeypatch: pytest.MonkeyPatch) -> None:
    store = StuckStore("update_offset:")
    adapter = make_telegram(fake, monkeypatch)
    await adapter.start(store)
    try:
        fake.push_message(ADA["id"], ADA, "one")
        await asyncio.wait_for(store.writing.wait(), 10)  # the offset past "one" is being written
        fake.push_message(ADA["id"], ADA, "two")
        await wait_for(lambda: "two" in store.texts(), what="the next update while the write hangs")
        store.release.set()
    finally:
        await adapter.stop()
    assert store.state[("tg", f"update_offset:{fake.bot_id}")] == str(int(store.submitted[-1].event_id) + 1)


async def test_a_hung_position_write_never_holds_up_the_next_mattermost_post(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_TOKEN", BOT_TOKEN)
    store = StuckStore("seen_at_ms")
    adapter = make_mattermost(world.url)
    await adapter.start(store)
    try:
        await wait_for(lambda: adapter.health().connected)
        await world.fake.user_post(world.alice["id"], world.dm["id"], "one")
        await asyncio.wait_for(store.writing.wait(), 10)  # where the stream was read to is being written
        await world.fake.user_post(world.alice["id"], world.dm["id"], "two")
        await wait_for(lambda: "two" in store.texts(), what="the next post while the write hangs")
        store.release.set()
    finally:
        await adapter.stop()
    assert ("mm", "seen_at_ms") in store.state


async def test_saves_are_paced_by_the_clock_and_the_rest_is_written_at_close() -> None:
    clock, store = ManualClock(), FakeDispatcher()
    position = ReadPosition(store, "b", "k", clock=clock, every=5.0, log=logging.getLogger("test"))
    assert await position.load() is None
    saved = lambda: store.state.get(("b", "k"))  # noqa: E731

    position.advance("1")
    await wait_for(lambda: saved() == "1", what="the first save, at once")
    position.advance("2")
    clock.advance(4.9)
    for _ in range(10):  # the saver runs as far as it can: to its wait on the clock
        await asyncio.sleep(0)
    assert saved() == "1"
    clock.advance(0.1)
    await wait_for(lambda: saved() == "2", what="the save once the clock moved past the pace")

    position.advance("3")
    await position.close()
    assert saved() == "3"


