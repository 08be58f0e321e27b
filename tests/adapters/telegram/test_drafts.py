"""A private reply streamed as message drafts lands as exactly the answer, whatever happened to the drafts.

The defect this guards against: a draft refused before it went out (over the bot's budget, or a
429) still added its text to the reply, so the next draft carried that text again and the final
message showed it twice; under dozens of private chats (the bot's budget busy) final answers
came out garbled and were counted as not landed.

Telegram's own budgets, on a `ManualClock` the adapter, the stream and the fake share (it jumps
to the next wait once nothing is in flight): a word every 1.2 s of it, a 429's second, no real wait.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.telegram.adapter import TelegramAdapter
from adapters.telegram.budget import TelegramBudget
from gateway.outbound.budget import Rule
from gateway.clock import Clock, ManualClock
from gateway.outbound.native_stream import NativeReplyStream
from gateway.messages import ChatKind
from gateway.store.engine import create_engine, migrate
from gateway.store.repo import Store
from tests.adapters.telegram.test_adapter import ADA, make_adapter, target
from tests.support.dispatcher import FakeDispatcher
from tests.fakes.telegram import FakeTelegram
from tests.support.patience import AUTOJUMP

pytestmark = pytest.mark.filterwarnings("ignore:.*retry_after.*:telegram.warnings.PTBDeprecationWarning")

WORDS = [f"word{i} " for i in range(40)]
EVERY = 1.2  # clock seconds between words: more often than a draft may go


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(autojump=AUTOJUMP)


@pytest.fixture
async def fake(clock: ManualClock) -> AsyncIterator[FakeTelegram]:
    async with FakeTelegram(clock=clock) as server:
        server.private_chat(ADA)
        yield server


@pytest.fixture
async def adapter(fake: FakeTelegram, clock: ManualClock,
                  monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TelegramAdapter]:
    adapter = make_adapter(fake, monkeypatch)  # on the fake's clock
    clock.idle = lambda: adapter.pacer.in_flight == 0  # no jump while a call is on its way
    adapter.drafts = True
    await adapter.start(FakeDispatcher())
    await fake.wait_for(lambda: adapter.health().connected, what="the adapter to connect")
    yield adapter
    await adapter.stop()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'd.db'}")
    await migrate(engine)
    try:
        yield Store(engine)
    finally:
        await engine.dispose()


async def _stream_words(adapter: TelegramAdapter, store: Store, clock: ManualClock) -> None:
    dm = target(ADA["id"], ChatKind.DM)
    live = adapter.native_stream(dm)
    assert live is not None, "a private chat streams as a draft"
    # Drafts from the first word: these tests are about drafts the budget or Telegram refuses, not
    # about the first draft's hold (tests/test_delivery.py).
    adapter.limits = dataclasses.replace(adapter.limits, first_draft_after=0.0)  # type: ignore[misc]
    stream = NativeReplyStream(live, adapter, dm, store, "run1", clock, fresh=True)
    for word in WORDS:
        await stream.append(word)
        clock.advance(EVERY)
    await stream.finish("".join(WORDS).strip())


async def test_drafts_refused_by_the_bots_busy_budget_are_not_repeated_in_the_answer(
        fake: FakeTelegram, adapter: TelegramAdapter, store: Store, clock: ManualClock) -> None:
    # The bot's budget is what dozens of private chats share: here it is nearly all taken.
    adapter.budget = TelegramBudget([Rule("chat", 1, 1.0), Rule("group", 20, 60.0), Rule("bot", 2, 20 * EVERY)])
    await _stream_words(adapter, store, clock)
    assert adapter.pacer.skipped > 0, "some drafts were refused by the budget"
    (answer,) = fake.sent(ADA["id"])
    assert answer.text == "".join(WORDS).strip()
    assert fake.throttled == []


async def test_a_draft_answered_429_is_not_repeated_in_the_answer(fake: FakeTelegram, adapter: TelegramAdapter,
                                                                  store: Store, clock: ManualClock) -> None:
    fake.fail_next("sendMessageDraft", error_code=429, retry_after=1, times=2)
    await _stream_words(adapter, store, clock)
    (answer,) = fake.sent(ADA["id"])
    assert answer.text == "".join(WORDS).strip()
    assert len(fake.drafts) == 1 and all(answer.text.startswith(d.strip()) for d in next(iter(fake.drafts.values())))


async def test_a_final_message_answered_429_is_posted_once_as_the_answer(fake: FakeTelegram, adapter: TelegramAdapter,
                                                                         store: Store, clock: ManualClock) -> None:
    fake.fail_next("sendMessage", error_code=429, retry_after=1)
    await _stream_words(adapter, store, clock)
    (answer,) = fake.sent(ADA["id"])
    assert answer.text == "".join(WORDS).strip()
    refused, posted = fake.calls_to("sendMessage")
    assert posted.at - refused.at >= 1.0, "the final waited out retry_after (on the clock the fake reads)"


async def test_words_written_while_a_timed_draft_is_in_flight_all_reach_the_answer(
        fake: FakeTelegram, adapter: TelegramAdapter, store: Store) -> None:
    """A draft whose time came while the model paused goes out on its own, and the model may go on
    meanwhile: what it adds during the draft's call is not in that draft, so it must still be sent
    (it was once taken as sent, and the final message lost those words)."""
    adapter.limits = dataclasses.replace(adapter.limits, first_draft_after=0.02, min_edit_interval=0.02)  # type: ignore[misc]
    dm = target(ADA["id"], ChatKind.DM)
    live = adapter.native_stream(dm)
    assert live is not None
    # Real time for the stream's draft timers: what this is about is a draft's round trip overlapping
    # the model's next words, which only real calls in flight show.
    stream = NativeReplyStream(live, adapter, dm, store, "run1", Clock(), fresh=True)
    for word in WORDS:
        await stream.append(word)
        await asyncio.sleep(0.003)  # shorter than a draft's round trip: some words come during one
    await stream.finish("".join(WORDS).strip())
    assert fake.drafts, "no draft was shown by its timer"
    (answer,) = fake.sent(ADA["id"])
    assert answer.text == "".join(WORDS).strip()
