"""Mattermost action callbacks authenticate the clicker (docs/security.md, "Mattermost"): the signed context
covers binding, channel, approval, decision and a nonce, not the user, so the adapter asks the server
(the post is this card in this channel; the user is a member) and binds each nonce to the first user who
presented it. A replayed context carrying a decider's user id decides nothing. Stop and `/memory` buttons
go through the same checks (`_vouched` in adapters/mattermost/adapter.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

import pytest

from adapters.mattermost.adapter import server_name
from gateway.store import repo
from gateway.store.notes import CHAT, Holder, NoteStore
from tests.conftest import free_port, running_gateway, wait_for
from tests.support.memory_cards import seed
from tests.test_stop import SLOW

from . import test_mattermost_memory as memory_e2e
from . import test_mattermost_stop as stop_e2e
from .conftest import BOT_TOKEN, World
from .test_mattermost_e2e import Script, _bot_posts, _card, _config, _connected, files_capability, script  # noqa: F401 (fixtures)


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=body) as resp:
        return resp.status, (await resp.json() if resp.status == 200 else {})


async def test_a_replayed_context_with_another_users_id_decides_nothing(
        tmp_path: Path, world: World, script: Script, files_capability: list[str]) -> None:  # noqa: F811
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    config = _config(tmp_path, world, gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": public}})
    eve = world.fake.add_user("eve")  # on the server, not in the channel
    async with running_gateway(config) as gw, aiohttp.ClientSession() as http:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete the old report")
        card = await _card(world, root["id"])

        # Bob presses Approve: he may not decide, and his click's body (as a proxy log keeps it) holds a
        # validly signed context.
        result = await world.fake.click(world.bob["id"], card["id"], "approve1")
        assert result.status == 200 and "alice" in result.ephemeral_text.lower()
        logged = dict(world.fake.click_log[-1])
        url = f"{public}/mattermost/actions/mm"

        # Replayed with Alice's user id (she may decide): nothing is decided. (Bob's click used that
        # context up: the card shows fresh buttons since, and it was his before that.)
        status, answer = await _post(http, url, {**logged, "user_id": world.alice["id"], "user_name": "alice"})
        assert status == 200 and "changed since it was shown" in answer["ephemeral_text"]
        assert files_capability == [] and "Approved" not in world.fake.posts[card["id"]]["message"]

        # A context never presented, sent as someone the server says is not in the channel: refused too.
        fresh = world.fake.posts[card["id"]]["props"]["attachments"][0]["actions"][0]["integration"]["context"]
        assert fresh["nonce"] != logged["context"]["nonce"], "the card was not given fresh buttons after Bob's click"
        status, answer = await _post(http, url, {**logged, "context": fresh, "user_id": eve["id"], "user_name": "alice"})
        assert status == 200 and "Only members of this channel" in answer["ephemeral_text"]
        assert files_capability == []

        # Alice's own click, through the server, still decides.
        result = await world.fake.click(world.alice["id"], card["id"], "approve1")
        assert result.status == 200 and result.ephemeral_text == ""
        await wait_for(lambda: files_capability == ["/srv/report.pdf"] or None, what="the tool to run")
        await wait_for(lambda: "Approved by alice" in world.fake.posts[card["id"]]["message"], what="the card update")


async def test_a_context_is_owned_by_the_first_user_who_presented_it(
        tmp_path: Path, world: World, script: Script, files_capability: list[str]) -> None:  # noqa: F811
    """Even before the card is given fresh buttons (a patch that failed, a second replica's click in
    between), a nonce someone presented stays theirs."""
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    config = _config(tmp_path, world, gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": public}})
    async with running_gateway(config) as gw, aiohttp.ClientSession() as http:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete the old report")
        card = await _card(world, root["id"])
        world.fake.rate_limit("PUT", r"/posts/[^/]+/patch", times=1, reset=1)  # the re-issue after Bob's click fails
        await world.fake.click(world.bob["id"], card["id"], "approve1")
        logged = dict(world.fake.click_log[-1])
        assert world.fake.posts[card["id"]]["props"]["attachments"][0]["actions"][0]["integration"]["context"][
            "nonce"] == logged["context"]["nonce"], "the card still shows the context Bob presented"
        status, answer = await _post(http, f"{public}/mattermost/actions/mm",
                                     {**logged, "user_id": world.alice["id"], "user_name": "alice"})
        assert status == 200 and "already pressed by someone else" in answer["ephemeral_text"]
        assert files_capability == [] and "Approved" not in world.fake.posts[card["id"]]["message"]


async def test_a_forged_or_replayed_stop_stops_nothing(tmp_path: Path, world: World,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop goes through the same checks as a card's buttons: a context we did not sign is 401, a
    replay under the requester's id or a click by someone outside the channel stops nothing."""
    eve = world.fake.add_user("eve")  # on the server, not in the channel
    async with stop_e2e._running(tmp_path, world, monkeypatch, SLOW) as gw, aiohttp.ClientSession() as http:
        root = await stop_e2e._alice_asks(world, "write a long essay")
        (reply,) = await wait_for(lambda: [p for p in _bot_posts(world, world.town, root["id"])
                                           if world.fake.buttons(p["id"])], what="the Stop action")
        [run] = await gw.store.runs_in([repo.RUNNING])
        result = await world.fake.click(world.bob["id"], reply["id"], "stop")  # Bob may not stop Alice's run
        assert result.status == 200 and "can stop this" in result.ephemeral_text
        logged = dict(world.fake.click_log[-1])
        url = _server_action(world, reply["id"], "stop")["url"]

        forged = {**logged, "user_id": world.alice["id"], "context": {**logged["context"], "stop_run": "another"}}
        assert (await _post(http, url, forged))[0] == 401
        status, answer = await _post(http, url, {**logged, "user_id": world.alice["id"], "user_name": "alice"})
        assert status == 200 and "changed since it was shown" in answer["ephemeral_text"]
        fresh = _server_action(world, reply["id"], "stop")["context"]
        assert fresh["nonce"] != logged["context"]["nonce"], "the reply was not given a fresh Stop after Bob's click"
        status, answer = await _post(http, url, {**logged, "context": fresh, "user_id": eve["id"], "user_name": "alice"})
        assert status == 200 and "Only members of this channel" in answer["ephemeral_text"]
        assert (await gw.store.run(run.id)).status == repo.RUNNING  # type: ignore[union-attr]

        result = await world.fake.click(world.alice["id"], reply["id"], "stop")  # hers, through the server
        assert result.status == 200 and result.ephemeral_text == ""
        await wait_for(lambda: _status(gw, run.id, repo.STOPPED), what="the run to stop")


def _server_action(world: World, post_id: str, action_id: str) -> dict[str, Any]:
    """An action's integration as the server holds it (a client never sees it; a proxy's log might)."""
    return next(a["integration"] for att in world.fake.posts[post_id]["props"]["attachments"]
                for a in att.get("actions") or [] if a["id"] == action_id)


async def _status(gw: Any, run_id: str, status: str) -> bool:
    row = await gw.store.run(run_id)
    return row is not None and row.status == status


async def test_a_forged_or_replayed_memory_click_changes_no_note(tmp_path: Path, world: World,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A `/memory` card's buttons go through the same checks: someone outside the chat presenting a
    context deletes nothing, and a click replayed after the card changed deletes nothing again."""
    monkeypatch.setenv("MM_E2E_TOKEN", BOT_TOKEN)
    eve = world.fake.add_user("eve")
    async with running_gateway(memory_e2e._config(tmp_path, world)) as gw, aiohttp.ClientSession() as http:
        await _connected(gw)
        room = Holder(CHAT, f"mattermost:{server_name(world.url)}:{world.group['id']}")
        await seed(gw.store, room, {"standup.md": "at nine"})
        await world.fake.user_post(world.alice["id"], world.group["id"], "@agentbot !memory")
        card = await wait_for(lambda: memory_e2e._card(world, world.group), what="the memory card")
        post_id = str(card["id"])
        delete = memory_e2e._action(world, post_id, 2, "Delete")
        url, context = _server_action(world, post_id, delete)["url"], _server_action(world, post_id, delete)["context"]
        body = {"user_id": eve["id"], "user_name": "alice", "channel_id": world.group["id"], "post_id": post_id,
                "context": context}

        assert (await _post(http, url, {**body, "context": {**context, "memory": "erase-all"}}))[0] == 401
        status, answer = await _post(http, url, body)
        assert status == 200 and "Only members of this channel" in answer["ephemeral_text"]
        assert "standup.md" in [n.name for n in await NoteStore(gw.store).held(room)]

        result = await world.fake.click(world.bob["id"], post_id, delete)  # Bob's own click deletes it
        assert result.status == 200 and "Deleted `assistant/standup.md`" in world.fake.posts[post_id]["message"]
        logged = dict(world.fake.click_log[-1])
        await seed(gw.store, room, {"standup.md": "at ten"})  # written again since
        status, answer = await _post(http, url, logged)
        assert status == 200 and "changed since it was shown" in answer["ephemeral_text"]
        assert "standup.md" in [n.name for n in await NoteStore(gw.store).held(room)]
