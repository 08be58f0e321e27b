"""Every door asks the same question: an HTTP API decision on a Mattermost card is made as the web's
local person, through their own linked Mattermost account; never as a wildcard "local" that anyone in the
channel's binding would let decide (the issue's repro: `deciders: channel`, "Approved by local").
docs/security.md, "Approval cards and decisions"."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from adapters.mattermost.adapter import server_name
from gateway.daemon import Gateway
from gateway.store.people import AccountRef, PeopleStore
from tests.conftest import free_port, running_gateway, wait_for, write_config

from .conftest import World
from .test_mattermost_e2e import MODEL, Script, _card, _connected, files_capability, script  # noqa: F401 (fixtures)


def _config(tmp_path: Path, world: World) -> Path:
    """A Mattermost binding whose cards anyone in the channel decides, and the web binding's API."""
    port = free_port()
    return write_config(tmp_path / "config", agents={"assistant": {
        "name": "MM", "model": MODEL, "capabilities": [{"id": "mm_e2e_files"}]}}, bindings={
        "mm": {"platform": "mattermost", "agent": "assistant", "approvals": {"deciders": "channel"},
               "mattermost": {"url": world.url, "token": "env:MM_E2E_TOKEN"}},
        "web": {"platform": "web", "agent": "assistant"}},
        gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"}})


async def _link_local(gw: Gateway, world: World, account: dict[str, object]) -> None:
    """The web's local person gets `account` (a Mattermost user) linked to them."""
    local = await gw.store.identify("web", "local", "local", "local")
    await PeopleStore(gw.store).link(AccountRef("mattermost", server_name(world.url), str(account["id"])),
                                     local.person_id, actor="test")


def _approval_id(world: World, card: dict[str, object]) -> str:
    return str(world.fake.posts[str(card["id"])]["props"]["attachments"][0]["actions"][0]["integration"]["context"][
        "approval_id"])


async def test_an_api_decision_on_a_mattermost_card_follows_the_mattermost_binding_deciders(
        tmp_path: Path, world: World, script: Script, files_capability: list[str]) -> None:  # noqa: F811
    async with running_gateway(_config(tmp_path, world)) as gw, aiohttp.ClientSession(gw.url) as s:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete the old report")
        card = await _card(world, root["id"])
        approval_id = _approval_id(world, card)

        # The local person has no Mattermost account: "anyone in this chat" is not them.
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        body = await r.json()
        assert r.status == 403 and "none is linked to you" in body["message"]
        assert files_capability == [] and len(world.fake.buttons(card["id"])) == 3
        assert "Approved by" not in world.fake.posts[card["id"]]["message"]

        # Linked to Bob's account (a member of the channel), the API decides as Bob would.
        await _link_local(gw, world, world.bob)
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status == 200 and (await r.json())["accepted"]
        await wait_for(lambda: files_capability == ["/srv/report.pdf"] or None, what="the tool to run")
        await wait_for(lambda: "Approved by local" in world.fake.posts[card["id"]]["message"], what="the card update")


async def test_under_deciders_channel_the_api_asks_the_platform_whether_the_linked_account_is_still_in_it(
        tmp_path: Path, world: World, script: Script, files_capability: list[str]) -> None:  # noqa: F811
    """`deciders: channel` means someone in the channel now: a click comes from inside it, an API call does
    not, so the one deciders rule (gateway/approvals/service.py, `_may_decide`) asks the platform."""
    async with running_gateway(_config(tmp_path, world)) as gw, aiohttp.ClientSession(gw.url) as s:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete the old report")
        card = await _card(world, root["id"])
        approval_id = _approval_id(world, card)

        # Bob's account is linked to the local person, but Bob has left the channel since.
        world.fake.leave(world.town["id"], world.bob["id"])
        await _link_local(gw, world, world.bob)
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        body = await r.json()
        assert r.status == 403 and "does not confirm you are in it" in body["message"]
        r = await s.get(f"/api/v1/approvals/{approval_id}")
        assert r.status == 404, "a person who left the channel still reads the call's arguments"
        assert files_capability == [] and "Approved by" not in world.fake.posts[card["id"]]["message"]
        assert world.fake.calls("GET", rf"/channels/{world.town['id']}/members/{world.bob['id']}"), \
            "the platform was not asked"

        # Alice, who is in the channel, linked too: the API decides as her account.
        await _link_local(gw, world, world.alice)
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status == 200 and (await r.json())["accepted"]
        await wait_for(lambda: files_capability == ["/srv/report.pdf"] or None, what="the tool to run")
        await wait_for(lambda: "Approved by local" in world.fake.posts[card["id"]]["message"], what="the card update")
