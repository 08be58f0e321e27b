"""The web chat's HTTP API end to end: a real daemon, a real SQLite file, SSE streaming."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from gateway.runs.llm import DEMO_INTRO

from .conftest import running_gateway, wait_for, write_config


async def _sse(session: aiohttp.ClientSession, path: str, into: list[dict[str, Any]]) -> None:
    async with session.get(path) as r:
        assert r.status == 200
        async for raw in r.content:
            line = raw.decode().strip()
            if line.startswith("data: "):
                into.append(json.loads(line[6:]))


async def test_message_streams_and_is_stored(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        r = await s.post("/api/v1/conversations", json={})
        assert r.status == 201
        conv = (await r.json())["id"]
        events: list[dict[str, Any]] = []
        listener = asyncio.create_task(_sse(s, f"/api/v1/conversations/{conv}/events", events))
        await wait_for(lambda: gw.events._listeners.get(conv), what="SSE subscription")
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hello there"})
        assert r.status == 202
        body = await r.json()
        assert set(body) == {"message_id", "run_id"}
        await wait_for(lambda: any(e["type"] == "run_end" for e in events), what="run end")
        listener.cancel()
        deltas = [e for e in events if e["type"] == "delta"]
        assert len(deltas) >= 2, "the answer should arrive in several streamed pieces"
        assert "".join(d.get("delta", "") for d in deltas) == deltas[-1]["text"]
        assert deltas[-1]["text"].startswith(DEMO_INTRO)
        assert [e for e in events if e["type"] == "run_end"][0]["status"] == "finished"

        r = await s.get(f"/api/v1/conversations/{conv}/messages")
        turns = (await r.json())["messages"]
        assert [(t["role"], t["status"]) for t in turns] == [("user", "processed"), ("assistant", "final")]
        assert turns[0]["text"] == "hello there"
        assert turns[1]["text"].endswith("You said: hello there")
        assert all(t["run_id"] == body["run_id"] for t in turns)


async def test_conversation_survives_restart(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "remember me"})

        async def answered() -> bool:
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            return len(turns) == 2

        await wait_for(answered)
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert [t["text"] for t in turns][0] == "remember me"
        assert turns[1]["role"] == "assistant"
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "still there?"})
        assert r.status == 202

        async def four() -> bool:
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            return len(turns) == 4

        await wait_for(four)


async def test_bad_input_is_refused_and_nothing_stored(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        url = f"/api/v1/conversations/{conv}/messages"
        r = await s.post(url, data=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status == 400 and "JSON" in (await r.json())["message"]
        r = await s.post(url, json={"txt": "typo"})
        assert r.status == 400
        r = await s.post(url, json={"text": "x" * 32_001})
        assert r.status == 413
        r = await s.post("/api/v1/conversations/nope/messages", json={"text": "hi"})
        assert r.status == 404
        r = await s.get("/api/v1/conversations/nope/messages")
        assert r.status == 404
        turns = (await (await s.get(url)).json())["messages"]
        assert turns == []


async def test_api_token_required_when_set(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("TEST_API_TOKEN", "s3cret-token")
    cfg = write_config(tmp_path / "c", gateway={"http": {"listen": "127.0.0.1:0", "api_token": "env:TEST_API_TOKEN"}})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        assert (await s.post("/api/v1/conversations", json={})).status == 401
        r = await s.post("/api/v1/conversations", json={}, headers={"Authorization": "Bearer wrong"})
        assert r.status == 401
        r = await s.post("/api/v1/conversations", json={}, headers={"Authorization": "Bearer s3cret-token"})
        assert r.status == 201
        assert (await s.get("/healthz")).status == 200


async def test_refuses_public_listen_without_token(tmp_path: Path) -> None:
    from bindings.loader import ConfigError

    cfg = write_config(tmp_path / "c", gateway={"http": {"listen": "0.0.0.0:0"}})
    try:
        async with running_gateway(cfg):
            raise AssertionError("started on 0.0.0.0 without an api_token")
    except ConfigError as e:  # refused where the config is loaded: `check` says the same
        assert "http.listen" in str(e) and "api_token" in str(e)


async def test_modes_switch_only_for_the_bindings_deciders_and_are_audited(tmp_path: Path) -> None:
    """The API is one more door to the same rule as `/approvals` in a chat."""
    bindings = {"web": {"platform": "web", "agent": "assistant", "approvals": {"deciders": ["someone-else"]}}}
    cfg = write_config(tmp_path / "c", bindings=bindings)
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        r = await s.post(f"/api/v1/conversations/{conv}/modes", json={"approve_all": True})
        assert r.status == 403 and (await r.json())["message"] == "Only someone-else can change approvals here."
        state = await (await s.get(f"/api/v1/conversations/{conv}/messages")).json()
        assert state["modes"] == {"approve_all": False, "ask_every_tool": False}
        assert [m for m in state["messages"] if m["role"] == "notice"] == []

    bindings["web"]["approvals"] = {"deciders": "requester"}
    write_config(tmp_path / "c", bindings=bindings)
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        r = await s.post(f"/api/v1/conversations/{conv}/modes", json={"ask_every_tool": True})
        assert r.status == 200 and await r.json() == {"approve_all": False, "ask_every_tool": True}
        state = await (await s.get(f"/api/v1/conversations/{conv}/messages")).json()
        assert state["modes"]["ask_every_tool"] is True
        [notice] = [m for m in state["messages"] if m["role"] == "notice"]
        assert notice["text"].startswith("local switched on “ask for every tool”")
        [change] = await gw.approvals.db.mode_changes(conv)
        assert (change.who, change.surface, change.ask_every_tool) == ("local", "api", True)
