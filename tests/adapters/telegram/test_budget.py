"""Telegram's budgets are never exceeded by the gateway: the fake answers 429 past them, and gets none.

Telegram's own budgets, on a `ManualClock` the adapter and the fake share: it jumps to the next
wait once nothing is in flight (`autojump`), so a group's twenty messages a minute take no minute,
and the fake's 429s are counted in the same time as the adapter's pacing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.budget import RULES, TelegramBudget
from gateway.outbound.budget import Rule
from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.outbound.delivery import ReplyStream
from gateway.messages import ChatKind
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import Store
from gateway.outbound.adapter import RateLimited
from tests.adapters.telegram.test_adapter import ADA, GROUP_ID, make_adapter, target
from tests.support.dispatcher import FakeDispatcher
from tests.fakes.telegram import FakeTelegram

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")



@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(autojump=AUTOJUMP)


@pytest.fixture
async def fake(clock: ManualClock) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(clock=clock) as server:
        server.private_chat(ADA)
        server.add_chat(GROUP_ID, "group", title="Team")
        yield server


@pytest.fixture
async def adapter(fake: FakeTelegram, clock: ManualClock,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TelegramAdapter]:
    adapter = make_adapter(fake, monkeypatch)  # on the fake's clock
    clock.idle = lambda: adapter.pacer.in_flight == 0  # no jump while a call is on its way
    await adapter.start(FakeDispatcher())
    await fake.wait_for(lambda: adapter.health().connected, what="the adapter to connect")
    yield adapter
    await adapter.stop()


async def test_the_fake_refuses_a_call_over_the_group_budget(fake: FakeTelegram, adapter: TelegramAdapter) -> None:
    # Budgets a hundred times the platform's: what a client that does not pace sends.
    adapter.budget = TelegramBudget([Rule(r.name, r.limit * 100, r.per) for r in RULES])
    group = target(GROUP_ID, ChatKind.GROUP)
    results = await asyncio.gather(*(adapter.post_message(group, f"n{i}") for i in range(3)), return_exceptions=True)
    assert any(isinstance(r, RateLimited) for r in results), "1 a second per chat: the second is refused"
    assert fake.throttled


async def test_a_30_message_burst_into_one_group_lands_within_its_budget(fake: FakeTelegram, clock: ManualClock,
                                                                         adapter: TelegramAdapter) -> None:
    group = target(GROUP_ID, ChatKind.GROUP)
    started = clock.monotonic()
    await asyncio.gather(*(adapter.post_message(group, f"message {i}") for i in range(30)))
    took = clock.monotonic() - started
    assert fake.throttled == [], "the gateway itself never causes a 429"
    assert sorted(m.text for m in fake.sent(GROUP_ID)) == sorted(f"message {i}" for i in range(30))
    limit, per = fake.budgets["group"]
    assert took >= per, "thirty messages do not fit one group window of twenty"
    arrivals = [c.at for c in fake.calls_to("sendMessage")]
    assert all(sum(1 for t in arrivals if a - per < t <= a) <= limit for a in arrivals)


async def test_a_draft_skips_a_tight_budget_and_the_final_always_lands(fake: FakeTelegram, adapter: TelegramAdapter,
                                                                       clock: ManualClock, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'd.db'}")
    await migrate(engine)
    try:
        group = target(GROUP_ID, ChatKind.GROUP)
        for i in range(18):  # the group's budget is nearly spent by others
            await adapter.post_message(group, f"busy {i}")
        stream = ReplyStream(adapter, group, Store(engine), "run1", clock, fresh=True)
        for i in range(40):  # a draft due every 1.2 s, more often than the group's budget has room for
            await stream.append(f"word{i} ")
            clock.advance(1.2)
        await stream.finish()
        mine = [m for m in fake.sent(GROUP_ID) if m.text.startswith("word0")]
        assert len(mine) == 1 and mine[0].text.strip() == " ".join(f"word{i}" for i in range(40))
        assert len(mine[0].edits) <= 2, "drafts beyond the budget were skipped, not queued"
        assert fake.throttled == []
        assert adapter.pacer.skipped > 0
    finally:
        await engine.dispose()
