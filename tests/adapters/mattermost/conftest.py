"""Fixtures for the Mattermost adapter tests: a seeded fake server and a recording core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.fakes.mattermost import FakeMattermost

BOT_TOKEN = "mm-bot-token-0123456789"
ALICE_TOKEN = "mm-alice-token"


@dataclass
class World:
    """The fake server and the people and places the tests use."""

    fake: FakeMattermost
    url: str
    bot: dict[str, Any]
    alice: dict[str, Any]
    bob: dict[str, Any]
    other_bot: dict[str, Any]
    team: dict[str, Any]
    other_team: dict[str, Any]
    town: dict[str, Any]  # a public channel with the bot, alice and bob
    secret: dict[str, Any]  # a private channel in the same team
    elsewhere: dict[str, Any]  # a public channel of the other team
    dm: dict[str, Any]  # alice <-> bot
    group: dict[str, Any]  # alice, bob and the bot


@pytest.fixture
async def world() -> AsyncIterator[World]:
    fake = FakeMattermost()
    url = await fake.start()
    bot = fake.add_user("agentbot", is_bot=True, token=BOT_TOKEN, first_name="Agent")
    alice = fake.add_user("alice", token=ALICE_TOKEN, first_name="Alice", last_name="Liddell")
    bob = fake.add_user("bob", nickname="Bobby")
    other_bot = fake.add_user("otherbot", is_bot=True, token="mm-other-bot")
    team = fake.add_team("acme")
    other_team = fake.add_team("umbrella")
    town = fake.add_channel(team["id"], "town-square", members=[bot["id"], alice["id"], bob["id"], other_bot["id"]],
                            purpose="Company-wide chatter", header="Be kind")
    secret = fake.add_channel(team["id"], "secret-plans", type="P", members=[bot["id"], alice["id"]],
                              purpose="Plans nobody should see")
    fake.add_channel(team["id"], "release-train", members=[alice["id"]], purpose="Shipping releases every week")
    elsewhere = fake.add_channel(other_team["id"], "lobby", members=[bot["id"], bob["id"]])
    dm = fake.direct_channel(alice["id"], bot["id"])
    group = fake.group_channel([alice["id"], bob["id"], bot["id"]])
    try:
        yield World(fake, url, bot, alice, bob, other_bot, team, other_team, town, secret, elsewhere, dm, group)
    finally:
        await fake.stop()
