"""While a tool runs after the reply's first draft, Telegram still shows the bot typing: sendChatAction
(which lasts 5 s) renewed at its interval on the gateway's clock, and none after the final."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.outbound.adapter import PlatformLimits
from gateway.runs.runner import TYPING_EVERY
from tests.conftest import running_gateway, wait_for, write_config
from tests.fakes.telegram import FakeTelegram
from tests.support.settled import settled
from tests.support.slow_tool import AGENT, FIRST, SlowTool, slow_tool

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

ADA = FakeTelegram.user(42, "Ada", "ada")
GROUP_ID = -100200


@pytest.fixture
async def fake(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram() as server:
        monkeypatch.setenv("TEST_TELEGRAM_TOKEN", server.token)
        server.add_chat(GROUP_ID, "group", title="Team")
        yield server


@pytest.fixture
def tool() -> Iterator[SlowTool]:
    with slow_tool() as t:
        yield t


async def test_typing_goes_on_during_a_long_tool_call_and_stops_at_the_final(
        tmp_path: Path, fake: FakeTelegram, tool: SlowTool) -> None:
    clock = fake.clock = ManualClock(autojump=AUTOJUMP)  # the gateway's and the fake's: the budgets count in its time
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    config = write_config(tmp_path / "config", agents={"assistant": AGENT},
                          bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram}})
    async with running_gateway(config, clock=clock) as gw:
        adapter = gw.adapters["tg"]
        adapter.limits = PlatformLimits(max_message_chars=4096, min_edit_interval=0.0)  # type: ignore[misc]
        await wait_for(lambda: adapter.health().connected, what="the Telegram binding to connect")

        def typing() -> int:
            return sum(1 for c in fake.calls_to("sendChatAction") if c.params.get("chat_id") == GROUP_ID)

        def said() -> list[str]:
            return [m.text for m in fake.sent(GROUP_ID)]

        text = "@gateway_bot what is the weather?"
        fake.push_message(GROUP_ID, ADA, text, entities=fake.mention(text))
        await asyncio.wait_for(tool.started.wait(), 30)
        await fake.wait_for(lambda: said() == [FIRST], what="the first draft")
        before = typing()
        for n in (1, 2, 3):  # the tool is still running: each interval renews the indicator
            clock.advance(TYPING_EVERY)
            await fake.wait_for(lambda: typing() >= before + n, what=f"typing renewal {n} during the tool call")

        tool.release.set()
        await fake.wait_for(lambda: len(m := said()) == 1 and m[0].endswith("Found: sunny"), what="the final")
        await settled(gw, fake)
        at_final = typing()
        for _ in range(3):
            clock.advance(TYPING_EVERY)
        await settled(gw, fake)
        assert typing() == at_final, "no typing after the final"


async def test_a_message_sent_during_an_answer_shows_typing_when_its_own_turn_starts(
        tmp_path: Path, fake: FakeTelegram, tool: SlowTool) -> None:
    """The chat shows the bot typing while it answers, so a second message then sends no indicator of
    its own; the first answer's message clears Telegram's indicator, so the second's turn shows it again
    at once (not one renewal interval later). The clock never moves: no renewal is due meanwhile."""
    clock = fake.clock = ManualClock()
    fake.budgets = {name: (limit, 0.0) for name, (limit, _) in fake.budgets.items()}  # nor the fake's
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    config = write_config(tmp_path / "config", agents={"assistant": AGENT},
                          gateway={"limits": {"platform_budget_scale": 0}},  # nothing waits on the clock
                          bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram}})
    async with running_gateway(config, clock=clock) as gw:
        adapter = gw.adapters["tg"]
        adapter.limits = PlatformLimits(max_message_chars=4096, min_edit_interval=0.0)  # type: ignore[misc]
        await wait_for(lambda: adapter.health().connected, what="the Telegram binding to connect")

        def seen() -> list[str]:  # what the group sees from the bot, in order
            return ["typing" if c.method == "sendChatAction" else c.method for c in fake.calls
                    if c.method in ("sendChatAction", "sendMessage", "editMessageText")
                    and c.params.get("chat_id") == GROUP_ID]

        first = "@gateway_bot what is the weather?"
        fake.push_message(GROUP_ID, ADA, first, entities=fake.mention(first))
        await asyncio.wait_for(tool.started.wait(), 30)
        await fake.wait_for(lambda: [m.text for m in fake.sent(GROUP_ID)] == [FIRST], what="the first draft")
        second = "@gateway_bot and tomorrow?"
        update_id, _ = fake.push_message(GROUP_ID, ADA, second, entities=fake.mention(second))
        await fake.wait_for(lambda: fake.confirmed_through >= update_id, what="the second message taken")

        tool.release.set()
        await fake.wait_for(lambda: len(fake.sent(GROUP_ID)) == 2 and all(
            m.text.endswith("Found: sunny") for m in fake.sent(GROUP_ID)), what="both answers")
        await settled(gw, fake)
        calls = seen()
        second_reply = calls.index("sendMessage", calls.index("sendMessage") + 1)
        assert calls[:2] == ["typing", "sendMessage"], calls  # the first message's sign, then its draft
        assert calls[1:second_reply].count("typing") == 1, calls  # none for the second message's arrival...
        assert calls[second_reply - 1] == "typing", calls  # ...one when its turn starts, before its reply


async def test_a_message_sent_after_the_answer_landed_but_before_its_run_ended_shows_typing(
        tmp_path: Path, fake: FakeTelegram, tool: SlowTool) -> None:
    """The answer's final message clears Telegram's indicator as soon as it is posted; the run is
    still 'working' until its end is stored (`end_run`, which waits up to the bound when an admin
    holds the lock). A message sent in that window must still show typing: nothing else shows it
    until the next run's turn starts, after the end, the claim and the preparation."""
    from gateway.store import repo

    clock = fake.clock = ManualClock()
    fake.budgets = {name: (limit, 0.0) for name, (limit, _) in fake.budgets.items()}
    telegram = {"token": "env:TEST_TELEGRAM_TOKEN", "api_url": fake.api_url, "mode": "polling"}
    config = write_config(tmp_path / "config", agents={"assistant": AGENT},
                          gateway={"limits": {"platform_budget_scale": 0}},
                          bindings={"tg": {"platform": "telegram", "agent": "assistant", "telegram": telegram,
                                              "admission": {"dm": "open"}}})
    chat = fake.private_chat(ADA).id
    async with running_gateway(config, clock=clock) as gw:
        adapter = gw.adapters["tg"]
        adapter.limits = PlatformLimits(max_message_chars=4096, min_edit_interval=0.0)  # type: ignore[misc]
        await wait_for(lambda: adapter.health().connected, what="the Telegram binding to connect")
        gate, ending = asyncio.Event(), asyncio.Event()
        end_run = gw.store.end_run

        async def slow_end(run_id: str, status: str, **kw: object) -> object:
            if status == repo.FINISHED and not gate.is_set():
                ending.set()
                await gate.wait()  # as an admin's lock would hold it, up to the bound
            return await end_run(run_id, status, **kw)  # type: ignore[arg-type]

        gw.store.end_run = slow_end  # type: ignore[method-assign]

        def typing() -> int:
            return sum(1 for c in fake.calls_to("sendChatAction") if c.params.get("chat_id") == chat)

        fake.push_message(chat, ADA, "what is the weather?")
        await asyncio.wait_for(tool.started.wait(), 30)
        tool.release.set()
        await asyncio.wait_for(ending.wait(), 30)
        await fake.wait_for(lambda: any(m.text.endswith("Found: sunny") for m in fake.sent(chat)), what="the final")
        before = typing()
        update_id, _ = fake.push_message(chat, ADA, "and tomorrow?")
        await fake.wait_for(lambda: fake.confirmed_through >= update_id, what="the second message taken")
        await asyncio.sleep(0.2)
        shown = typing() - before
        gate.set()
        await fake.wait_for(lambda: sum(m.text.endswith("Found: sunny") for m in fake.sent(chat)) == 2,
                            what="both answers")
        await settled(gw, fake)
        assert shown >= 1, "the second message showed no typing though the first answer had cleared it"
