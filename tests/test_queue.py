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


async def test_runs_started_with_their_ingest_keep_to_the_limit_and_give_their_slots_back(tmp_path: Path) -> None:
    """A message into an idle conversation is claimed with its ingest when a slot is free: never more
    runs at once than `limits.concurrent_runs`, and every slot comes back (a second wave runs the same)."""
    config = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "test:gated"}},
                          gateway={"limits": {"concurrent_runs": 2}})
    async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
        for wave in range(2):
            GATE[:] = [asyncio.Event()]; SEEN.clear(); ACTIVE[:] = [0, 0]
            convs = [(await (await s.post("/api/v1/conversations", json={})).json())["id"] for _ in range(5)]
            await asyncio.gather(*(s.post(f"/api/v1/conversations/{c}/messages", json={"text": f"w{wave} {c}"})
                                   for c in convs))
            await wait_for(lambda: ACTIVE[0] == 2, what="two runs at once")
            GATE[0].set()

            async def answered() -> bool:
                turns = [await _turns(s, c) for c in convs]
                return all(any(t["role"] == "assistant" for t in ts) for ts in turns)

            await wait_for(answered, what=f"wave {wave}: every conversation answered")
            assert ACTIVE[1] == 2, f"wave {wave}: {ACTIVE[1]} runs at once under a limit of 2"
