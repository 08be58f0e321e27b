"""`/memory` on Mattermost through the real daemon and the fake server: interactive message
actions (signed context), the post updated in place by the action's answer, and what the next
run's model is given; in a group the card is the chat's notes, never a person's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.daemon import Gateway
from gateway.store.notes import CHAT, PERSON, Holder, NoteStore
from tests.conftest import free_port, running_gateway, wait_for, write_config
from tests.support import memory_cards
from tests.support.memory_cards import GIVEN, note_names, seed

from .conftest import BOT_TOKEN, World
from .test_mattermost_e2e import _connected


def _config(tmp_path: Path, world: World) -> Path:
    memory_cards.register()
    port = free_port()
    return write_config(
        tmp_path / "config", agents={"assistant": memory_cards.AGENT},
        bindings={"mm": {"platform": "mattermost", "agent": "assistant",
                         "mattermost": {"url": world.url, "token": "env:MM_E2E_TOKEN"}}},
        gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"}},
    )


def _card(world: World, channel: dict[str, object]) -> dict[str, object] | None:
    return next((p for p in world.fake.posts_in(str(channel["id"]))
                 if p["user_id"] == world.bot["id"] and world.fake.buttons(p["id"])), None)


def _action(world: World, post_id: str, note_number: int | None, label: str) -> str:
    return next(b["id"] for b in world.fake.buttons(post_id) if b["name"].startswith(label)
                and (note_number is None or b["id"].startswith(f"mem{note_number}x")))


async def _ask(gw: Gateway, world: World, text: str) -> None:
    before = len(GIVEN)
    await world.fake.user_post(world.alice["id"], world.dm["id"], text)
    await wait_for(lambda: len(GIVEN) > before and not gw.scheduler.active, what="a run")


async def test_a_dm_card_stops_a_note_for_the_next_run_and_erases_after_confirmation(
        tmp_path: Path, world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_E2E_TOKEN", BOT_TOKEN)
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        server = world.url.split("//", 1)[1]
        alice = Holder(PERSON, (await gw.store.identify("mattermost", server, world.alice["id"], "alice")).person_id)
        await seed(gw.store, alice, {"diet.md": "vegetarian"})
        notes = NoteStore(gw.store)

        await world.fake.user_post(world.alice["id"], world.dm["id"], "!memory")
        card = await wait_for(lambda: _card(world, world.dm), what="the memory card")
        post_id = str(card["id"])
        assert "What agents wrote about you" in str(card["message"]) and "assistant/diet.md" in str(card["message"])

        result = await world.fake.click(world.alice["id"], post_id, _action(world, post_id, 2, "Stop using"))
        assert result.status == 200
        assert "Stopped using `assistant/diet.md`" in world.fake.posts[post_id]["message"]
        await _ask(gw, world, "what do you know about me?")
        assert note_names(GIVEN[-1].listed) == {"MEMORY.md"} and "vegetarian" not in GIVEN[-1].instructions

        await world.fake.click(world.alice["id"], post_id, _action(world, post_id, None, "Erase all"))
        assert "Erase all 2 notes about you?" in world.fake.posts[post_id]["message"]
        assert len(await notes.held(alice)) == 2, "asking erases nothing"
        await world.fake.click(world.alice["id"], post_id, _action(world, post_id, None, "Yes, erase"))
        assert "Erased 2 notes." in world.fake.posts[post_id]["message"] and await notes.held(alice) == []


async def test_in_a_group_the_card_is_the_chats_notes(tmp_path: Path, world: World,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MM_E2E_TOKEN", BOT_TOKEN)
    async with running_gateway(_config(tmp_path, world)) as gw:
        await _connected(gw)
        server = world.url.split("//", 1)[1]
        alice = Holder(PERSON, (await gw.store.identify("mattermost", server, world.alice["id"], "alice")).person_id)
        room = Holder(CHAT, f"mattermost:{server}:{world.group['id']}")
        await seed(gw.store, alice, {"diet.md": "vegetarian"})
        await seed(gw.store, room, {"standup.md": "at nine"})

        await world.fake.user_post(world.alice["id"], world.group["id"], "@agentbot !memory")
        card = await wait_for(lambda: _card(world, world.group), what="the memory card")
        message = str(card["message"])
        assert "What agents keep for this chat" in message and "standup.md" in message and "diet.md" not in message
        result = await world.fake.click(world.bob["id"], str(card["id"]), _action(world, str(card["id"]), 2, "Delete"))
        assert result.status == 200 and "Deleted `assistant/standup.md` (bob)." in world.fake.posts[card["id"]]["message"]
        assert [n.name for n in await NoteStore(gw.store).held(room)] == ["MEMORY.md"]
        assert len(await NoteStore(gw.store).held(alice)) == 2
