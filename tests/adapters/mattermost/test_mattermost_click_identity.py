"""Mattermost action callbacks authenticate the clicker (docs/security.md, "Mattermost"): the signed context
covers binding, channel, approval, decision and a nonce, not the user, so the adapter asks the server
(the post is this card in this channel; the user is a member) and binds each nonce to the first user who
presented it. A replayed context carrying a decider's user id decides nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from tests.conftest import free_port, running_gateway, wait_for

from .conftest import World
from .test_mattermost_e2e import Script, _card, _config, _connected, files_capability, script  # noqa: F401 (fixtures)


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
