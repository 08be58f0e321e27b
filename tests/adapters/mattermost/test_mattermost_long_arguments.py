"""A decider on Mattermost sees every argument before deciding: what fits the post's 16,383 characters
is in its message, which says how much more there is; the whole text is in an attachment of the post
(docs/security.md, "Mattermost")."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.runs.llm import REGISTERED, register_model
from tests.conftest import free_port, running_gateway, wait_for, write_config
from tests.support.gated_git import CAPABILITY, LONG_BRANCH, RAN, asking_to_delete

from .conftest import BOT_TOKEN, World
from .test_mattermost_e2e import _connected

MODEL = "mattermost-e2e-long-arguments"
LONGER = "staging" + " " * 20_000 + "AND-ALSO-PROD"  # past a post's 16,383 characters


@pytest.fixture
def asking(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.setenv("MM_E2E_TOKEN", BOT_TOKEN)
    branch: list[str] = []
    register_model(MODEL, lambda: asking_to_delete(branch[0]))
    RAN.clear()
    yield branch
    REGISTERED.pop(MODEL, None)


def _config(tmp_path: Path, world: World) -> Path:
    port = free_port()
    return write_config(tmp_path / "config", agents={"assistant": {
        "name": "MM", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}}, bindings={
        "mm": {"platform": "mattermost", "agent": "assistant", "mattermost": {"url": world.url, "token": "env:MM_E2E_TOKEN"}}},
        gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"}})


async def _card(world: World) -> dict[str, Any]:
    root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete it")
    (card,) = await wait_for(lambda: [p for p in world.fake.posts_in(world.town["id"], root_id=root["id"])
                                      if p["user_id"] == world.bot["id"] and "delete_branch" in p["message"]],
                             what="the approval card")
    return world.fake.posts[card["id"]]


def _fenced(text: str) -> str:
    return text.split("```json\n", 1)[1].rsplit("\n```", 1)[0]


async def test_a_1700_character_argument_is_whole_in_the_mattermost_card(
        tmp_path: Path, world: World, asking: list[str]) -> None:
    asking.append(LONG_BRANCH)
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        card = await _card(world)
        assert json.loads(_fenced(card["message"])) == {"branch": LONG_BRANCH}
        assert "more characters" not in card["message"]


async def test_arguments_past_a_post_are_whole_in_an_attachment_before_approval(
        tmp_path: Path, world: World, asking: list[str]) -> None:
    asking.append(LONGER)
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        card = await _card(world)
        assert "AND-ALSO-PROD" not in card["message"]
        assert "more characters: every argument is in the attachment “All arguments of delete_branch” below" in card["message"]
        [full] = [a for a in card["props"]["attachments"] if a.get("title") == "All arguments of delete_branch"]
        assert json.loads(_fenced(full["text"])) == {"branch": LONGER}
        assert RAN == []
        result = await world.fake.click(world.alice["id"], card["id"], "approve1")
        assert result.status == 200
        await wait_for(lambda: RAN == [LONGER] or None, what="the tool to run")
        # Decided, the post keeps the whole text (and loses its buttons).
        await wait_for(lambda: world.fake.buttons(card["id"]) == [], what="the buttons to go")
        assert [a["title"] for a in world.fake.posts[card["id"]]["props"]["attachments"]] == ["All arguments of delete_branch"]
