"""The fake speaks the wire protocol the adapter relies on (checked with bare aiohttp)."""

from __future__ import annotations

import json

import aiohttp

from tests.fakes.mattermost import wait_until

from .conftest import BOT_TOKEN, World


async def _frames(ws: aiohttp.ClientWebSocketResponse, n: int) -> list[dict]:
    return [json.loads((await ws.receive(timeout=5)).data) for _ in range(n)]


async def test_challenge_auth_sends_hello_before_the_ok(world: World) -> None:
    async with aiohttp.ClientSession() as s, s.ws_connect(world.url.replace("http", "ws") + "/api/v4/websocket") as ws:
        await ws.send_str(json.dumps({"seq": 1, "action": "authentication_challenge", "data": {"token": BOT_TOKEN}}))
        hello, ok, status = await _frames(ws, 3)
    assert hello["event"] == "hello" and hello["seq"] == 0 and hello["data"]["connection_id"]
    assert ok == {"status": "OK", "seq_reply": 1}
    assert status["event"] == "status_change" and status["seq"] == 1


async def test_a_bad_token_in_the_challenge_closes_the_socket(world: World) -> None:
    async with aiohttp.ClientSession() as s, s.ws_connect(world.url.replace("http", "ws") + "/api/v4/websocket") as ws:
        await ws.send_str(json.dumps({"seq": 1, "action": "authentication_challenge", "data": {"token": "nope"}}))
        msg = await ws.receive(timeout=5)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_posted_carries_the_post_as_a_json_string_and_a_resume_replays(world: World) -> None:
    url = world.url.replace("http", "ws") + "/api/v4/websocket"
    headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(url, headers=headers) as ws:
            hello, _status = await _frames(ws, 2)
            await world.fake.user_post(world.alice["id"], world.dm["id"], "hi there")
            (posted,) = await _frames(ws, 1)
        assert posted["event"] == "posted" and posted["seq"] == 2
        assert posted["data"]["channel_type"] == "D" and posted["data"]["team_id"] == ""
        assert json.loads(posted["data"]["post"])["message"] == "hi there"
        assert json.loads(posted["data"]["mentions"]) == [world.bot["id"]]
        await wait_until(lambda: world.fake.live_websockets() == 0)
        # Posted while nobody listens: queued, and replayed to a resume from seq 3.
        await world.fake.user_post(world.alice["id"], world.dm["id"], "are you there?")
        params = {"connection_id": hello["data"]["connection_id"], "sequence_number": "3"}
        async with s.ws_connect(url, headers=headers, params=params) as ws:
            (replayed,) = await _frames(ws, 1)
    assert replayed["seq"] == 3 and json.loads(replayed["data"]["post"])["message"] == "are you there?"


async def test_rest_errors_limits_and_idempotent_creates(world: World) -> None:
    headers = {"Authorization": f"Bearer {BOT_TOKEN}"}
    async with aiohttp.ClientSession(base_url=world.url, headers=headers) as s:
        async with s.post("/api/v4/posts", json={"channel_id": world.town["id"], "message": "x" * 16_384}) as r:
            assert r.status == 400 and set(await r.json()) >= {"id", "message", "request_id", "status_code"}
        body = {"channel_id": world.town["id"], "message": "once", "pending_post_id": "p1"}
        async with s.post("/api/v4/posts", json=body) as r1, s.post("/api/v4/posts", json=body) as r2:
            assert (await r1.json())["id"] == (await r2.json())["id"]
        world.fake.rate_limit("GET", r"/users/me$", reset=3)
        async with s.get("/api/v4/users/me") as r:
            assert r.status == 429 and r.content_type == "text/plain"
            assert r.headers["X-Ratelimit-Reset"] == "3" and r.headers["Retry-After"] == "3"
    assert [p["message"] for p in world.fake.posts_by(world.bot["id"])] == ["once"]
