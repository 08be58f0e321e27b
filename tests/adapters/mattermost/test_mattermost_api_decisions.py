"""Every door asks the same question: an HTTP API decision on a Mattermost card is made as the web's
local person, through their own linked Mattermost account; never as a wildcard "local" that anyone in the
channel's binding would let decide (the issue's repro: `deciders: channel`, "Approved by local").
docs/security.md, "Approval cards and decisions"."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from adapters.mattermost.adapter import server_name
from gateway.store.people import AccountRef, PeopleStore
from tests.conftest import free_port, running_gateway, wait_for, write_config

from .conftest import World
from .test_mattermost_e2e import MODEL, Script, _card, _connected, files_capability, script  # noqa: F401 (fixtures)


async def test_an_api_decision_on_a_mattermost_card_follows_the_mattermost_binding_deciders(
        tmp_path: Path, world: World, script: Script, files_capability: list[str]) -> None:  # noqa: F811
    port = free_port()
    config = write_config(tmp_path / "config", agents={"assistant": {
        "name": "MM", "model": MODEL, "capabilities": [{"id": "mm_e2e_files"}]}}, bindings={
        "mm": {"platform": "mattermost", "agent": "assistant", "approvals": {"deciders": "channel"},
               "mattermost": {"url": world.url, "token": "env:MM_E2E_TOKEN"}},
        "web": {"platform": "web", "agent": "assistant"}},
        gateway={"http": {"listen": f"127.0.0.1:{port}", "public_url": f"http://127.0.0.1:{port}"}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        await _connected(gw)
        root = await world.fake.user_post(world.alice["id"], world.town["id"], "@agentbot delete the old report")
        card = await _card(world, root["id"])
        approval_id = world.fake.posts[card["id"]]["props"]["attachments"][0]["actions"][0]["integration"]["context"][
            "approval_id"]

        # The local person has no Mattermost account: "anyone in this chat" is not them.
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        body = await r.json()
        assert r.status == 403 and "none is linked to you" in body["message"]
        assert files_capability == [] and len(world.fake.buttons(card["id"])) == 3
        assert "Approved by" not in world.fake.posts[card["id"]]["message"]

        # Linked to Bob's account (a member of the channel), the API decides as Bob would.
        local = await gw.store.identify("web", "local", "local", "local")
        await PeopleStore(gw.store).link(AccountRef("mattermost", server_name(world.url), world.bob["id"]),
                                         local.person_id, actor="test")
        r = await s.post(f"/api/v1/approvals/{approval_id}", json={"decision": "approve"})
        assert r.status == 200 and (await r.json())["accepted"]
        await wait_for(lambda: files_capability == ["/srv/report.pdf"] or None, what="the tool to run")
        await wait_for(lambda: "Approved by local" in world.fake.posts[card["id"]]["message"], what="the card update")
