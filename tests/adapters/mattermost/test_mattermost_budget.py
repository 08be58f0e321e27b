"""Mattermost's rate limit is learned from the server's headers and never exceeded by the gateway.

The fake limits as a server with rate limiting on does (GCRA per token, `X-Ratelimit-*` on every
answer, 429 past the burst); the limit here is small so that a burst of replies must be paced.
The adapter and the fake share a `ManualClock` that jumps to the next wait once no call is on its
way (`autojump`): the seconds of refill the burst waits for take none, and the fake counts each
call in the same time as the adapter's wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import aiohttp
import pytest

from adapters.mattermost.adapter import MattermostAdapter
from gateway.clock import ManualClock
from gateway.messages import ChatKind
from gateway.outbound.adapter import ReplyTarget
from tests.fakes.mattermost import wait_until
from tests.support.patience import AUTOJUMP

from .conftest import BOT_TOKEN, World
from tests.support.dispatcher import FakeDispatcher

from .helpers import make_adapter

PER_SEC, MAX_BURST = 20, 9


@pytest.fixture(autouse=True)
def _token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_TOKEN", BOT_TOKEN)


@pytest.fixture
def clock(world: World) -> ManualClock:
    world.fake.clock = clock = ManualClock(autojump=AUTOJUMP)  # the fake's, and the adapter's
    return clock


@pytest.fixture
async def adapter(world: World, clock: ManualClock) -> AsyncIterator[MattermostAdapter]:
    world.fake.limit_rate(PER_SEC, MAX_BURST)
    a = make_adapter(world.url, clock=clock)  # on the fake's clock
    clock.idle = lambda: a.server_limit is None or a.server_limit.in_flight == 0  # no jump under a call
    await a.start(FakeDispatcher())
    await wait_until(lambda: a.health().connected)
    try:
        yield a
    finally:
        await a.stop()


async def test_the_fake_refuses_calls_past_its_limit_and_says_the_limit(world: World, clock: ManualClock) -> None:
    world.fake.limit_rate(PER_SEC, MAX_BURST)
    headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
    async with aiohttp.ClientSession() as http:
        async def call() -> tuple[int, Mapping[str, str]]:
            async with http.get(f"{world.url}/api/v4/users/me", headers=headers) as r:
                return r.status, r.headers.copy()  # case-insensitive, as HTTP headers are
        answers = await asyncio.gather(*(call() for _ in range(3 * (MAX_BURST + 1))))
    statuses = [status for status, _ in answers]
    assert statuses.count(200) >= MAX_BURST + 1 and 429 in statuses, "a client that does not pace gets 429s"
    ok = next(h for status, h in answers if status == 200)
    assert ok["X-Ratelimit-Limit"] == str(MAX_BURST + 1) and int(ok["X-Ratelimit-Remaining"]) <= MAX_BURST
    refused = next(h for status, h in answers if status == 429)
    assert refused["X-Ratelimit-Remaining"] == "0" and int(refused["Retry-After"]) >= 1
    assert len(world.fake.throttled) == statuses.count(429)


async def test_a_burst_of_replies_and_edits_lands_with_no_429(world: World, clock: ManualClock,
                                                              adapter: MattermostAdapter) -> None:
    town = ReplyTarget(platform="mattermost", binding_id="mm", workspace=world.url.removeprefix("http://"),
                       channel=world.town["id"], thread=None, chat_kind=ChatKind.CHANNEL)
    started = clock.monotonic()
    ids = await asyncio.gather(*(adapter.post_message(town, f"reply {i}") for i in range(30)))
    await asyncio.gather(*(adapter.edit_message(town, post_id, f"reply {i}, edited") for i, post_id in enumerate(ids)))
    assert world.fake.throttled == [], "the gateway itself never causes a 429"
    assert sorted(world.fake.posts[post_id]["message"] for post_id in ids) == sorted(
        f"reply {i}, edited" for i in range(30))
    limit = adapter.server_limit
    assert limit is not None and limit.limit == MAX_BURST + 1 and limit.waited > 0, "the burst was paced"
    # Sixty calls where the server refills twenty a second past its burst: as long at least, on the clock.
    assert clock.monotonic() - started >= (60 - (MAX_BURST + 1)) / PER_SEC
