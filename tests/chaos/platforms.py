"""The daemon against all three chat platforms at once, for dropped connections and fuzzed input.

harness.py drives Slack and the web API; this adds the fake Telegram (long polling, its polls cut
on demand) and the fake Mattermost (websocket, resumable from its sequence number) beside the
same fake Slack (Socket Mode, redelivering unacked envelopes), the same scripted model and the
same `agent-gateway run` subprocess. Senders count what a person sees: one conversation per
person, each message sent after the answer to the one before arrived, so extra posts are doubles.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.adapters.stopping import MM_TOKEN, Daemon, Platforms
from tests.conftest import database_url, write_config
from tests.support.settled import daemon_parts, settled
from tests.fakes.mattermost import FakeMattermost
from tests.fakes.openai import FakeOpenAI
from tests.fakes.slack import FakeSlack
from tests.fakes.telegram import FakeTelegram

from .harness import ANSWER, CHANNEL, LEASE_S, PERSON, Tally, _until, slack_conversation

SLACK_BINDING, TELEGRAM_BINDING, MATTERMOST_BINDING = "slack", "telegram", "mattermost"


@dataclass
class World:
    slack: FakeSlack
    telegram: FakeTelegram
    mattermost: FakeMattermost
    model: FakeOpenAI
    daemon: Daemon
    mm_bot: dict[str, Any]
    url: str = ""  # the database's

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.daemon.port}"

    def parts(self) -> list[Any]:
        """What `settled()` waits on: the daemon's runs and outbound queue, every fake."""
        return [daemon_parts(self.api, self.url), self.slack, self.telegram, self.mattermost, self.model]


@contextlib.asynccontextmanager
async def world(directory: Path, store: str = "sqlite", *, model_delay: float = 0.08) -> AsyncIterator[World]:
    """The three fakes and the model on loopback, the daemon connected to all three."""
    directory.mkdir(parents=True, exist_ok=True)
    model = await FakeOpenAI(delay=model_delay).start()
    mattermost = FakeMattermost()
    await mattermost.start()
    try:
        mm_bot = mattermost.add_user("agentbot", is_bot=True, token=MM_TOKEN)
        team = mattermost.add_team("chaos")  # the bot's team: its channels (DMs too) are listed per team
        mattermost.team_members[team["id"]].add(mm_bot["id"])
        async with FakeSlack() as slack, FakeTelegram("123456:TEST-fake-token") as telegram, \
                database_url(store, directory) as url:
            slack.redeliver = True
            slack.add_user(PERSON, "ada", real_name="Ada")
            slack.add_channel(CHANNEL, "chaos", members=[PERSON, slack.bot_user_id])
            daemon = Daemon(directory, env={"OPENAI_BASE_URL": model.base_url, "OPENAI_API_KEY": "not-needed"})
            bindings = Platforms(slack, telegram, mattermost).bindings()
            for spec in bindings.values():
                spec["admission"] = {"dm": "open"}  # every sender is a stranger here: no pairing first
            write_config(
                directory,
                agents={"assistant": {"name": "Chaos agent", "model": "openai-chat:chaos-model",
                                      "instructions": "You are a test agent."}},
                bindings={**bindings, "web": {"platform": "web", "agent": "assistant"}},
                gateway={"database": {"url": url, "run_lease_seconds": LEASE_S},
                         "http": {"listen": f"127.0.0.1:{daemon.port}"}},
            )
            await daemon.start()
            try:
                await daemon.wait_ready()
                yield World(slack, telegram, mattermost, model, daemon, mm_bot, url)
            finally:
                await daemon.close()
    finally:
        await mattermost.stop()
        await model.stop()


# --- what a person sees ---------------------------------------------------------------------


def telegram_answers(w: World, chat_id: int) -> list[str]:
    return [m.text for m in w.telegram.sent(chat_id)]


def mattermost_answers(w: World, channel_id: str) -> list[str]:
    return [p["message"] for p in w.mattermost.posts_in(channel_id) if p["user_id"] == w.mm_bot["id"]]


def final(texts: list[str]) -> int:
    return sum(t.strip() == ANSWER for t in texts)


# --- senders: one person, one conversation, a message after each answer ---------------------


async def telegram_conversation(w: World, tally: Tally, until: float, *, wait: float, person: int,
                                chats: list[tuple[int, int]]) -> None:
    user = w.telegram.user(person, f"Person{person}", f"person{person}")
    chat = w.telegram.private_chat(user).id
    sent = 0
    while time.monotonic() < until:
        w.telegram.push_message(chat, user, f"telegram {person} message {sent}")
        sent += 1
        tally.sent += 1
        tally.admitted += 1  # queued until a poll's offset confirms it

        async def answered(n: int = sent) -> bool:
            return final(telegram_answers(w, chat)) >= n
        if not await _until(answered, wait):
            tally.lost += 1
            tally.problems.append(f"telegram {person}: no answer to message {sent - 1} within {wait:g}s")
            break
        tally.answered += 1
    chats.append((chat, sent))


async def mattermost_conversation(w: World, tally: Tally, until: float, *, wait: float, person: str,
                                  channels: list[tuple[str, int]]) -> None:
    user = w.mattermost.add_user(person)
    dm = w.mattermost.direct_channel(user["id"], w.mm_bot["id"])["id"]
    sent = 0
    while time.monotonic() < until:
        await w.mattermost.user_post(user["id"], dm, f"mattermost {person} message {sent}")
        sent += 1
        tally.sent += 1
        tally.admitted += 1  # in the server's queue for the bot's connection

        async def answered(n: int = sent) -> bool:
            return final(mattermost_answers(w, dm)) >= n
        if not await _until(answered, wait):
            tally.lost += 1
            tally.problems.append(f"mattermost {person}: no answer to message {sent - 1} within {wait:g}s")
            break
        tally.answered += 1
    channels.append((dm, sent))


# --- the faults ---------------------------------------------------------------------------


@dataclass
class Drops:
    """Connections cut, per platform, as a person running the bench would count them."""

    slack: int = 0
    mattermost: int = 0
    mattermost_fresh: int = 0  # of which the server could not resume (a restart): caught up over REST
    telegram_polls: int = 0

    @property
    def total(self) -> int:
        return self.slack + self.mattermost + self.telegram_polls


async def dropper(w: World, drops: Drops, stop: asyncio.Event, *, every: tuple[float, float], rng: random.Random) -> None:
    """Slack's socket closed (or a `disconnect` asked for) and Mattermost's websocket closed, at random."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.uniform(*every))
        if stop.is_set():
            return
        if rng.random() < 0.5:
            if rng.random() < 0.75:
                await w.slack.drop_connections()
            else:
                try:
                    await asyncio.wait_for(w.slack.request_reconnect(), 1)
                except (AssertionError, TimeoutError):  # no live socket right now: nothing to ask
                    continue
            drops.slack += 1
        else:
            # Now and then the server "restarts": its resume queue is gone, a catch-up over REST must do.
            fresh = drops.mattermost == 0 or rng.random() < 0.25  # the first one always
            await w.mattermost.drop_websockets(forget=fresh)
            drops.mattermost += 1
            drops.mattermost_fresh += fresh


async def stream_under_drops(w: World, tally: Tally, *, conversations: int, duration: float,
                             every: tuple[float, float], poll_cut_share: float, wait: float = 60.0,
                             seed: int = 22) -> Drops:
    """Conversations on all three platforms while connections drop; then the count of answers."""
    rng = random.Random(seed)
    drops = Drops()
    stop = asyncio.Event()
    w.telegram.poll_cut_share = poll_cut_share
    cutter = asyncio.create_task(dropper(w, drops, stop, every=every, rng=rng))
    telegram_chats: list[tuple[int, int]] = []
    mm_channels: list[tuple[str, int]] = []
    until = time.monotonic() + duration

    async def later(delay: float, coro: Any) -> None:
        await asyncio.sleep(delay)
        await coro

    senders = []
    for i in range(conversations):
        senders.append(later(i * 0.2, slack_conversation(w, tally, until, wait=wait, tag=f"s{i}")))  # type: ignore[arg-type]
        senders.append(later(i * 0.2 + 0.05, telegram_conversation(w, tally, until, wait=wait, person=7000 + i,
                                                                   chats=telegram_chats)))
        senders.append(later(i * 0.2 + 0.1, mattermost_conversation(w, tally, until, wait=wait, person=f"person{i}",
                                                                    channels=mm_channels)))
    asyncio.get_running_loop().call_later(duration, stop.set)
    try:
        await asyncio.gather(*senders)
    finally:
        stop.set()
        await cutter
        w.telegram.poll_cut_share = 0.0
    drops.telegram_polls = w.telegram.polls_cut
    await settled(*w.parts())  # nothing left that could post a late double
    from .harness import thread_answers

    for thread, n in tally.threads:
        _count(tally, f"slack thread {thread}", thread_answers(w.slack, thread), n)  # type: ignore[arg-type]
    for chat, n in telegram_chats:
        _count(tally, f"telegram chat {chat}", telegram_answers(w, chat), n)
    for channel, n in mm_channels:
        _count(tally, f"mattermost channel {channel}", mattermost_answers(w, channel), n)
    tally.redelivered = w.slack.redelivered
    return drops


def _count(tally: Tally, where: str, texts: list[str], n: int) -> None:
    tally.duplicated += max(0, len(texts) - n)
    tally.wrong += sum(t.strip() != ANSWER for t in texts)
    if len(texts) != n or any(t.strip() != ANSWER for t in texts):
        tally.problems.append(f"{where}: {n} messages, answers {texts}")
