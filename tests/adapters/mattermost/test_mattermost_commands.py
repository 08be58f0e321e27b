"""Native slash commands on Mattermost through the real daemon and the fake server: registered once
(a restart reuses them), answered privately on the command's response_url, a forged request refused
with 401 and nothing run; without http.public_url nothing is registered and the log says why."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.inbound.commands import COMMANDS
from gateway.runs.llm import REGISTERED
from tests.conftest import free_port, running_gateway, wait_for, write_config
from tests.fakes.mattermost import BUILT_IN_COMMANDS
from tests.support import search_model

from .conftest import BOT_TOKEN, World

NATIVE = sorted(c.name for c in COMMANDS if not c.hidden and c.name not in BUILT_IN_COMMANDS)
TEAMS = 2  # the bot is on both of the world's teams: every command is registered on each


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("MM_COMMANDS_TOKEN", BOT_TOKEN)
    yield search_model.register()
    REGISTERED.pop(search_model.MODEL, None)


def _config(tmp_path: Path, world: World, model: str, port: int | None) -> Path:
    http = {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"} if port else {}
    return write_config(
        tmp_path / "config",
        agents={"assistant": {"name": "Commander", "model": model}},
        bindings={"mm": {"platform": "mattermost", "agent": "assistant",
                         "mattermost": {"url": world.url, "token": "env:MM_COMMANDS_TOKEN"}}},
        gateway={"http": http} if http else None,
    )


def _creates(world: World) -> list[Any]:
    return [r for r in world.fake.requests if r[0] == "POST" and r[1] == "/api/v4/commands"]


def _ours(world: World, port: int) -> list[dict[str, Any]]:
    return [c for c in world.fake.commands.values() if c["url"] == f"http://127.0.0.1:{port}/mattermost/commands/mm"]


async def test_commands_are_registered_once_across_two_starts(tmp_path: Path, world: World, model: str) -> None:
    world.fake.command_managers.add(world.bot["id"])
    port = free_port()
    config = _config(tmp_path, world, model, port)
    tried: list[list[str]] = []
    for _ in range(2):
        before = len(_creates(world))
        async with running_gateway(config) as gw:
            await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")
            await wait_for(lambda: len(_ours(world, port)) == TEAMS * len(NATIVE), what="the commands")
        tried.append(sorted(r[2]["trigger"] for r in _creates(world)[before:]))
    for team in (world.team, world.other_team):
        triggers = sorted(c["trigger"] for c in _ours(world, port) if c["team_id"] == team["id"])
        assert triggers == NATIVE, "one per command and team, none twice"
    # Created on the first start; the second reuses them, and only tries the server's own /help again (refused).
    assert tried[0] == sorted(NATIVE * TEAMS + ["help"] * TEAMS)
    assert tried[1] == ["help"] * TEAMS
    assert "help" not in NATIVE and "whoami" in NATIVE


async def test_a_native_command_answers_privately_and_a_forged_one_runs_nothing(
        tmp_path: Path, world: World, model: str) -> None:
    world.fake.command_managers.add(world.bot["id"])
    port = free_port()
    async with running_gateway(_config(tmp_path, world, model, port)) as gw:
        await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")
        await wait_for(lambda: len(_ours(world, port)) == TEAMS * len(NATIVE), what="the commands")

        status, _ = await world.fake.run_command(world.alice["id"], world.town["id"], "/schedules")
        assert status == 200
        [answer] = await wait_for(lambda: [e for e in world.fake.ephemerals if e.get("via") == "command"],
                                  what="the answer")
        assert answer["user_id"] == world.alice["id"] and answer["channel_id"] == world.town["id"]
        assert answer["message"] == "No tasks are scheduled in this conversation."
        assert not [p for p in world.fake.posts_in(world.town["id"]) if p["user_id"] == world.bot["id"]], \
            "a private answer is not posted in the channel"

        # The same request with a token the server never issued: 401, and nothing is run or said.
        forged = {"channel_id": world.dm["id"], "channel_name": "", "command": "/new", "text": "",
                  "token": "forged-token-000000000000", "trigger_id": "forged", "user_id": world.alice["id"],
                  "user_name": "alice", "team_id": world.team["id"],
                  "response_url": f"{world.url}/hooks/commands/nothing"}
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/mattermost/commands/mm", data=forged) as resp:
                assert resp.status == 401
            without = {k: v for k, v in forged.items() if k != "token"}
            async with http.post(f"http://127.0.0.1:{port}/mattermost/commands/mm", data=without,
                                 headers={"Authorization": "Token forged-token-000000000000"}) as resp:
                assert resp.status == 401
        await gw.outbound.drain(5.0)
        assert await gw.store.conversation_by_key(f"mattermost:127.0.0.1:{world.url.rsplit(':', 1)[1]}:"
                                                  f"{world.dm['id']}") is None, "no conversation was touched"
        assert len([e for e in world.fake.ephemerals if e.get("via") == "command"]) == 1
        assert not world.fake.posts_in(world.dm["id"]), "nothing was said in the DM"


async def test_without_public_url_nothing_is_registered_and_the_log_says_why(
        tmp_path: Path, world: World, model: str, caplog: pytest.LogCaptureFixture) -> None:
    world.fake.command_managers.add(world.bot["id"])
    caplog.set_level(logging.INFO, logger="adapters")
    async with running_gateway(_config(tmp_path, world, model, None)) as gw:
        await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")
        assert not world.fake.commands and not _creates(world)
        assert any("slash commands not registered: http.public_url is not set" in r.getMessage()
                   for r in caplog.records)
        # The `!` commands keep working.
        await world.fake.user_post(world.alice["id"], world.dm["id"], "!whoami")
        await wait_for(lambda: [p for p in world.fake.posts_in(world.dm["id"]) if p["user_id"] == world.bot["id"]],
                       what="the !whoami answer")


async def test_a_public_answer_to_a_top_level_command_is_posted_in_the_channel(
        tmp_path: Path, world: World, model: str) -> None:
    """`/memory` in a channel answers with a card for everyone there: a top-level command has no post
    to thread under, so the card goes to the channel itself (a root_id nobody posted would be refused)."""
    world.fake.command_managers.add(world.bot["id"])
    port = free_port()
    async with running_gateway(_config(tmp_path, world, model, port)) as gw:
        await wait_for(lambda: gw.adapters["mm"].health().connected, what="the websocket")
        await wait_for(lambda: len(_ours(world, port)) == TEAMS * len(NATIVE), what="the commands")
        status, _ = await world.fake.run_command(world.alice["id"], world.town["id"], "/memory")
        assert status == 200
        [card] = await wait_for(lambda: [p for p in world.fake.posts_in(world.town["id"])
                                         if p["user_id"] == world.bot["id"]], what="the memory card")
        assert card["root_id"] == "" and card["message"].startswith("#### What agents keep for this chat"), card
