"""Conversation search on Mattermost through the real daemon: a private channel's thread is found
while the person is in the channel, and gone (not found, not opened) once they left; a channel
the server will not answer about is left out, and the answer says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.clock import ManualClock
from gateway.membership import TTL
from gateway.runs.llm import REGISTERED
from tests.conftest import running_gateway, wait_for, write_config
from tests.support import search_model

from .conftest import BOT_TOKEN, World


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("MM_SEARCH_TOKEN", BOT_TOKEN)
    yield search_model.register()
    REGISTERED.pop(search_model.MODEL, None)


def _config(tmp_path: Path, world: World, model: str) -> Path:
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Searcher", "model": model, "capabilities": [{"id": "conversation_search"}]}},
        bindings={"mm": {"platform": "mattermost", "agent": "assistant",
                         "mattermost": {"url": world.url, "token": "env:MM_SEARCH_TOKEN"}}},
    )


def _dm_answers(world: World) -> list[str]:
    return [p["message"] for p in world.fake.posts_in(world.dm["id"])
            if p["user_id"] == world.bot["id"] and p["message"].startswith("The tool said")]


async def _ask(world: World, text: str) -> str:
    before = len(_dm_answers(world))
    await world.fake.user_post(world.alice["id"], world.dm["id"], text)
    answers = await wait_for(lambda: len(a := _dm_answers(world)) > before and a, what=f"the answer to {text!r}")
    return answers[-1]


async def test_a_private_channel_thread_is_found_while_a_member_and_gone_after_leaving(
        tmp_path: Path, world: World, model: str) -> None:
    clock = ManualClock()
    async with running_gateway(_config(tmp_path, world, model), clock=clock) as gw:
        await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")
        root = await world.fake.user_post(world.alice["id"], world.secret["id"], "@agentbot the codename is zebrafish")
        await wait_for(lambda: [p for p in world.fake.posts_in(world.secret["id"], root_id=root["id"])
                                if p["user_id"] == world.bot["id"] and p["message"] == "noted"], what="the reply")

        found = await _ask(world, "find zebrafish")
        assert "1 conversation matched 'zebrafish'" in found and "Mattermost channel" in found, found
        conversation = search_model.conversation_id(found)
        asked_once = len(_membership_asked(world))
        assert asked_once == 1
        await _ask(world, "find zebrafish")
        assert len(_membership_asked(world)) == asked_once, "answered from the cache within its minute"

        # The bot is taken out of the channel: the server will not say whether Alice is still in it.
        world.fake.leave(world.secret["id"], world.bot["id"])
        clock.advance(TTL + 1)
        unsure = await _ask(world, "find zebrafish")
        # (The DM's own earlier "find zebrafish" is Alice's whatever happens: only the channel is in question.)
        assert "Mattermost channel" not in unsure and "codename" not in unsure, unsure
        assert "1 channel conversation was left out" in unsure, "fail closed, and say so"

        world.fake.join(world.secret["id"], world.bot["id"])
        world.fake.leave(world.secret["id"], world.alice["id"])
        clock.advance(TTL + 1)
        gone = await _ask(world, "find zebrafish")
        assert "Mattermost channel" not in gone and "codename" not in gone and "left out" not in gone, gone
        opened = await _ask(world, f"open {conversation}")
        assert f"There is no conversation '{conversation}' among this person's" in opened
        assert "codename" not in opened

        assert len(_membership_asked(world)) > asked_once, "asked the server again once the minute was over"


def _membership_asked(world: World) -> list[Any]:
    return [r for r in world.fake.requests
            if r[1] == f"/api/v4/channels/{world.secret['id']}/members/{world.alice['id']}"]
