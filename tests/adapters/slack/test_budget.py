"""Slack's rate limits are never exceeded by the gateway: the fake answers 429 past them, and gets none.

Slack's own limits, on a `ManualClock` the adapter and the fake share: it jumps to the next wait
once nothing is in flight (`autojump`), so a minute's budget takes no minute, and the fake's 429s
are counted in the same time as the adapter's pacing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from adapters.slack.adapter import SlackAdapter
from adapters.slack.budget import RULES, SlackBudget
from gateway.clock import ManualClock
from tests.support.patience import AUTOJUMP
from gateway.outbound.budget import Rule
from gateway.messages import ChatKind
from gateway.outbound.adapter import RateLimited, ReplyTarget
from tests.fakes.slack import FakeSlack

from tests.support.dispatcher import FakeDispatcher

from .conftest import start_adapter



@pytest.fixture
async def fast_slack(slack_env: None) -> AsyncIterator[FakeSlack]:
    async with FakeSlack(clock=ManualClock(autojump=AUTOJUMP)) as fake:
        fake.add_channel("C0GEN", "general", members=["U0BOT"])
        yield fake


@pytest.fixture
async def paced(fast_slack: FakeSlack) -> AsyncIterator[SlackAdapter]:
    adapter = await start_adapter(fast_slack, FakeDispatcher())  # on the fake's clock
    assert isinstance(fast_slack.clock, ManualClock)
    fast_slack.clock.idle = lambda: adapter.pacer.in_flight == 0  # no jump while a call is on its way
    try:
        yield adapter
    finally:
        await adapter.stop()


GENERAL = ReplyTarget("slack", "acme", "T0TEAM", "C0GEN", None, ChatKind.CHANNEL)


async def test_the_fake_refuses_posts_over_the_channel_limit(fast_slack: FakeSlack, paced: SlackAdapter) -> None:
    paced.budget = SlackBudget([Rule(r.name, r.limit * 100, r.per) for r in RULES])  # a client that does not pace
    results = await asyncio.gather(*(paced.post_message(GENERAL, f"n{i}") for i in range(3)), return_exceptions=True)
    assert any(isinstance(r, RateLimited) for r in results)
    assert fast_slack.throttled


async def test_posts_and_edits_in_a_burst_stay_within_the_channel_limit_and_the_tier(fast_slack: FakeSlack,
                                                                                     paced: SlackAdapter) -> None:
    posted = await asyncio.gather(*(paced.post_message(GENERAL, f"message {i}") for i in range(10)))
    await asyncio.gather(*(paced.edit_message(GENERAL, ts, f"edit {n} of {ts}") for ts in posted for n in range(6)))
    assert fast_slack.throttled == [], "the gateway itself never causes a 429"
    assert len(fast_slack.bot_messages("C0GEN")) == 10
    assert len(fast_slack.calls_to("chat.update")) == 60, "more than a Tier 3 minute's 50: paced, none lost"
    assert fast_slack.clock.monotonic() >= 60.0, "the clock moved a window on: the pacer waited"


async def test_thread_status_is_paced_per_channel_not_per_workspace(fast_slack: FakeSlack, paced: SlackAdapter) -> None:
    """assistant.threads.setStatus has a special limit, per channel like chat.postMessage: 60
    assistant threads in 60 DMs all show their status at once (more than a workspace tier's
    minute allows), and statuses over one channel's minute are skipped, never a 429."""
    dms = [f"D{i:04d}" for i in range(60)]
    for dm in dms:
        fast_slack.add_channel(dm, "", kind="im", members=["U0BOT"])

    def in_dm(dm: str) -> ReplyTarget:
        return ReplyTarget("slack", "acme", "T0TEAM", dm, "1.1", ChatKind.DM)

    await asyncio.gather(*(paced.show_status(in_dm(dm), "is thinking…") for dm in dms))
    shown = [c.args["channel_id"] for c in fast_slack.calls_to("assistant.threads.setStatus") if c.status == 200]
    assert sorted(shown) == dms
    for _ in range(70):
        await paced.show_status(in_dm(dms[0]), "using web_fetch…")
    assert fast_slack.throttled == []
    assert len([c for c in fast_slack.calls_to("assistant.threads.setStatus") if c.args["channel_id"] == dms[0]]) < 61


async def test_the_channel_tools_stay_within_their_methods_tiers(fast_slack: FakeSlack, paced: SlackAdapter) -> None:
    """native channel tools: a search reads up to ten pages of Tier 2 conversations.list, a member
    list looks up each person with Tier 4 users.info; a model that calls them in a loop never
    makes the gateway cause a 429 (issue 33)."""
    people = [f"U{n:04}" for n in range(120)]
    fast_slack.add_channel("C0BIG", "big-room", members=["U0BOT", *people])
    big = ReplyTarget("slack", "acme", "T0TEAM", "C0BIG", None, ChatKind.CHANNEL)
    directory = paced.directory()
    searches = await asyncio.gather(*(directory.search_channels(GENERAL, "big", 5) for _ in range(30)))
    members, _ = await directory.channel_members(big, limit=120)
    infos = await asyncio.gather(*(directory.channel_info(big) for _ in range(60)))
    assert fast_slack.throttled == [], "the gateway itself never causes a 429"
    assert all(found and found[0].name == "big-room" for found, _ in searches)
    assert len(members) == 120 and len(infos) == 60
    assert len(fast_slack.calls_to("conversations.list")) == 30, "more than a Tier 2 minute's 20: paced, none lost"
    assert len(fast_slack.calls_to("users.info")) >= 120, "more than a Tier 4 minute's 100"


async def test_file_uploads_stay_within_the_external_upload_methods_tier(fast_slack: FakeSlack,
                                                                         paced: SlackAdapter) -> None:
    """files.getUploadURLExternal and files.completeUploadExternal are Tier 4 (their reference pages):
    more files at once than a Tier 4 minute's 100 are paced, none refused, none lost."""
    from gateway.outbound.adapter import OutboundFile

    files = [OutboundFile(f"n{i}.csv", f"n,{i}\n".encode(), "text/csv") for i in range(110)]

    async def one(f: OutboundFile) -> str:
        return await paced.share(GENERAL, [(f, await paced.upload(GENERAL, f))], "")

    await asyncio.gather(*(one(f) for f in files))
    assert fast_slack.throttled == [], "the gateway itself never causes a 429"
    assert sorted(s.title for s in fast_slack.shared_files) == sorted(f.name for f in files)
    assert len(fast_slack.calls_to("files.completeUploadExternal")) == 110
