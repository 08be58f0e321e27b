"""A finished reply leaves nothing behind in the web adapter (the daemon runs for months)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from .conftest import running_gateway, wait_for


async def test_finished_replies_are_forgotten_by_the_web_adapter(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        for text in ("one", "two"):
            r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": text})
            assert r.status == 202

        async def answered() -> bool:
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            return sum(t["role"] == "assistant" for t in turns) == 2 and not gw.scheduler.active

        await wait_for(answered, what="two answers")
        assert gw.adapters["web"]._shown == {}, "the web adapter still holds finished replies' text"
