"""One run at a time per conversation; messages that arrive meanwhile become the next turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
from pydantic_ai.messages import ModelMessage, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.runs.llm import register_model

from .conftest import running_gateway, wait_for, write_config

GATE: list[asyncio.Event] = []
SEEN: list[str] = []
ACTIVE = [0, 0]  # current, max


async def _gated(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    prompt = next(p.content for p in messages[-1].parts if isinstance(p, UserPromptPart))
    SEEN.append(str(prompt))
    ACTIVE[0] += 1
    ACTIVE[1] = max(ACTIVE)
    try:
        await GATE[0].wait()
        yield f"answer to {prompt}"
    finally:
        ACTIVE[0] -= 1


register_model("test:gated", lambda: FunctionModel(stream_function=_gated))


def _config(tmp: Path, queue: int = 20) -> Path:
    return write_config(
        tmp,
        agents={"assistant": {"name": "A", "model": "test:gated"}},
        gateway={"limits": {"queued_messages_per_conversation": queue}},
    )


async def _turns(s: aiohttp.ClientSession, conv: str) -> list[dict]:
    return (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]


async def test_messages_during_a_run_become_the_next_turn_in_order(tmp_path: Path) -> None:
    GATE[:] = [asyncio.Event()]; SEEN.clear(); ACTIVE[:] = [0, 0]
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        first = await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "one"})).json()
        await wait_for(lambda: SEEN == ["one"], what="first run to start")
        second = await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "two"})).json()
        third = await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "three"})).json()
        assert second["run_id"] == third["run_id"] != first["run_id"]
        GATE[0].set()

        async def done() -> bool:
            return len([t for t in await _turns(s, conv) if t["role"] == "assistant" and t["status"] == "final"]) == 2

        await wait_for(done)
        assert SEEN == ["one", "two\n\nthree"]
        assert ACTIVE[1] == 1, "two runs of one conversation overlapped"
        turns = await _turns(s, conv)
        assert [t["text"] for t in turns] == ["one", "answer to one", "two", "three", "answer to two\n\nthree"]


async def test_full_queue_says_busy_and_keeps_nothing(tmp_path: Path) -> None:
    GATE[:] = [asyncio.Event()]; SEEN.clear()
    async with running_gateway(_config(tmp_path / "c", queue=1)) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        url = f"/api/v1/conversations/{conv}/messages"
        assert (await s.post(url, json={"text": "one"})).status == 202
        await wait_for(lambda: SEEN == ["one"])
        assert (await s.post(url, json={"text": "two"})).status == 202
        r = await s.post(url, json={"text": "three"})
        assert r.status == 429
        assert "waiting" in (await r.json())["message"]
        GATE[0].set()
        await wait_for(lambda: len(SEEN) == 2)
        assert SEEN == ["one", "two"]


async def test_conversations_run_in_parallel(tmp_path: Path) -> None:
    GATE[:] = [asyncio.Event()]; SEEN.clear(); ACTIVE[:] = [0, 0]
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        for i in range(3):
            conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
            await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": f"c{i}"})
        await wait_for(lambda: ACTIVE[0] == 3, what="three conversations running at once")
        GATE[0].set()
