"""The web chat's API: a handoff's answer streams into the same conversation's events under the other agent's name."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from tests.capabilities.scripted import say_calls

from .conftest import running_gateway, wait_for, write_config
from .test_web_api import _sse


def member(name: str) -> dict[str, Any]:
    return {"name": name, "model": "scripted", "instructions": f"You are {name}.", "capabilities": [{"id": "handoffs"}]}


async def test_a_handoff_answers_in_the_web_conversation_under_its_name(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, agents={"assistant": member("Assistant"), "researcher": member("Researcher")})
    script = say_calls(("send_to_agent", {"agent": "researcher", "message": "find the release date", "wait": False}))
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        events: list[dict[str, Any]] = []
        listener = asyncio.create_task(_sse(s, f"/api/v1/conversations/{conv}/events", events))
        await wait_for(lambda: gw.events._listeners.get(conv), what="SSE subscription")
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": script})
        assert r.status == 202

        def texts() -> dict[str, str]:
            shown: dict[str, str] = {}
            for e in events:
                if e["type"] == "delta":
                    shown[e["message_id"]] = e["text"]
            return shown

        async def stored() -> list[dict[str, Any]] | None:
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            return turns if any(t.get("agent") == "researcher" for t in turns) else None

        # A page re-reading the conversation shows the researcher's answer where it was posted, under its name;
        # the envelope it was sent in is the researcher's conversation's, not a message the person sent here.
        turns = await wait_for(stored, what="the researcher's answer among the conversation's messages")
        assert [(t["role"], t.get("agent")) for t in turns] == [("user", None), ("assistant", None),
                                                                ("assistant", "researcher")]
        answer = turns[2]["text"]
        assert answer.startswith("**Researcher:**") and "find the release date" in answer
        assert "untrusted-content" in answer, "the researcher read the message as data in an envelope"
        # The page saw the same answer stream in live on the conversation's own event stream.
        await wait_for(lambda: answer in texts().values(), what="the researcher's answer on the event stream")
        listener.cancel()
        own = [t for t in texts().values() if not t.startswith("**Researcher:**")]
        assert len(own) == 1 and own[0].startswith("Handed over to Researcher")
