"""While a tool runs after the reply's first draft, Mattermost still shows the bot typing (renewed at
its interval, on the gateway's clock), and the typing stops with the final."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.clock import ManualClock
from gateway.outbound.adapter import PlatformLimits
from gateway.runs.runner import TYPING_EVERY
from tests.conftest import running_gateway, wait_for, write_config
from tests.support.settled import settled
from tests.support.slow_tool import AGENT, FINAL, FIRST, SlowTool, slow_tool

from .conftest import BOT_TOKEN, World


@pytest.fixture
def tool(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowTool]:
    monkeypatch.setenv("MM_SLOW_TOKEN", BOT_TOKEN)
    with slow_tool() as t:
        yield t


async def test_typing_goes_on_during_a_long_tool_call_and_stops_at_the_final(
        tmp_path: Path, world: World, tool: SlowTool) -> None:
    clock = ManualClock()
    config = write_config(tmp_path / "config", agents={"assistant": AGENT}, bindings={"mm": {
        "platform": "mattermost", "agent": "assistant", "mattermost": {"url": world.url, "token": "env:MM_SLOW_TOKEN"}}})
    async with running_gateway(config, clock=clock) as gw:
        # No hold before the first draft: it is out before the tool is called.
        gw.adapters["mm"].limits = PlatformLimits(max_message_chars=16_383, min_edit_interval=0.05)  # type: ignore[misc]
        await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")

        def typing() -> int:
            return sum(1 for t in world.fake.typing if t["channel_id"] == world.dm["id"])

        def bot_posts() -> list[str]:
            return [p["message"] for p in world.fake.posts_in(world.dm["id"]) if p["user_id"] == world.bot["id"]]

        await world.fake.user_post(world.alice["id"], world.dm["id"], "what is the weather?")
        await asyncio.wait_for(tool.started.wait(), 30)
        await wait_for(lambda: bot_posts() == [FIRST], what="the first draft")
        before = typing()
        for n in (1, 2, 3):  # the tool is still running: each interval renews the indicator
            clock.advance(TYPING_EVERY)
            await wait_for(lambda: typing() >= before + n, what=f"typing renewal {n} during the tool call")
        assert bot_posts() == [FIRST], "nothing else was posted meanwhile: typing was the sign of work"

        tool.release.set()
        await wait_for(lambda: bot_posts() == [FINAL], what="the final")
        await settled(gw, world.fake)
        at_final = typing()
        for _ in range(3):
            clock.advance(TYPING_EVERY)
        await settled(gw, world.fake)
        assert typing() == at_final, "no typing after the final"
