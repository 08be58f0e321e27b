"""The web chat's messages listing while a run ends: its reply is listed once, where it was said.

The listing reads the store more than once (the runs still going, the messages, the handoffs' answers).
These tests hold a run's end at a chosen point through the store, so the interleaving a busy
machine makes now and then happens every time.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.store.repo import Store
from tests.capabilities.scripted import say_calls

from .conftest import run_finished, running_gateway, wait_for, write_config
from .test_web_handoffs import member


class EndBetweenReads:
    """Holds the first run's end until the listing has made the read `read`, then lets the run end
    before that read's rows go back to the listing: the run ends between that read and the next."""

    def __init__(self, store: Store, read: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ending, self.read, self.ended = asyncio.Event(), asyncio.Event(), asyncio.Event()
        real_end, real_read = store.end_run, getattr(store, read)

        async def end_run(*args: Any, **kwargs: Any) -> None:
            self.ending.set()
            await self.read.wait()
            try:
                await real_end(*args, **kwargs)
            finally:
                self.ended.set()

        async def held_read(*args: Any, **kwargs: Any) -> Any:
            rows = await real_read(*args, **kwargs)
            if self.ending.is_set() and not self.read.is_set():
                self.read.set()
                await self.ended.wait()
            return rows

        monkeypatch.setattr(store, "end_run", end_run)
        monkeypatch.setattr(store, read, held_read)


@pytest.mark.parametrize("read", ["messages", "runs_in"])
async def test_a_reply_that_ends_while_the_page_reads_the_conversation_is_listed_once(
        config_dir: Path, monkeypatch: pytest.MonkeyPatch, read: str) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        held = EndBetweenReads(gw.store, read, monkeypatch)
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        r = await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hello there"})
        run_id = (await r.json())["run_id"]
        await wait_for(held.ending.is_set, what="the run's end")
        # The page reloads just then: the reply is there once (the final, or the delivered text still
        # marked streaming), never missing and never twice (an empty extra bubble).
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert [(t["role"], t["run_id"]) for t in turns] == [("user", run_id), ("assistant", run_id)]
        assert turns[1]["text"].endswith("You said: hello there")
        assert held.ended.is_set()
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        assert [(t["role"], t["status"]) for t in turns] == [("user", "processed"), ("assistant", "final")]


async def test_a_handoff_answering_before_the_handing_reply_ends_is_listed_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The handing run's end is held until the page has read the handoff's answer: the reply still
    streaming sits where it was said (before the answer), as the stored final will."""
    cfg = write_config(tmp_path, agents={"assistant": member("Assistant"), "researcher": member("Researcher")})
    script = say_calls(("send_to_agent", {"agent": "researcher", "message": "find the release date", "wait": False}))
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        store, release = gw.store, asyncio.Event()
        real_end = store.end_run

        async def end_run(run_id: str, *args: Any, **kwargs: Any) -> None:
            run = await store.run(run_id)
            if run is not None and run.conversation_id == conv:  # the handing run, not the researcher's
                await release.wait()
            await real_end(run_id, *args, **kwargs)

        monkeypatch.setattr(store, "end_run", end_run)
        await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": script})

        async def listed() -> list[dict[str, Any]] | None:
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            return turns if any(t.get("agent") == "researcher" for t in turns) else None

        turns = await wait_for(listed, what="the researcher's answer among the conversation's messages")
        assert [(t["role"], t.get("agent"), t["status"]) for t in turns] == [
            ("user", None, "processing"), ("assistant", None, "streaming"), ("assistant", "researcher", "final")]
        assert turns[1]["text"].startswith("Handed over to Researcher")
        release.set()

        async def final() -> list[dict[str, Any]] | None:
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            return turns if turns[1]["status"] == "final" else None

        turns = await wait_for(final, what="the handing reply's final")
        assert [(t["role"], t.get("agent")) for t in turns] == [("user", None), ("assistant", None),
                                                                ("assistant", "researcher")]


async def test_a_reply_resumed_after_its_card_is_listed_while_it_streams(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that said something before its approval card has that text stored (under its run id)
    when it parks; once approved it runs again and streams the rest below the card. A page loaded
    meanwhile shows both: the stored text does not count as the resumed run's answer."""
    from .test_approvals import Chat, _config

    gate = tmp_path / "gate"
    monkeypatch.setenv("OPS_RESUME_GATE", str(gate))  # the resumed reply stays in flight until the gate
    async with running_gateway(_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        run_id = (await chat.say("deploy api"))["run_id"]
        card = await chat.card()
        status, _ = await chat.decide(card["items"][0]["approval_id"], "approve")
        assert status == 200
        await wait_for(lambda: "[deploy: deployed api]" in (gw.runner.live(run_id) or ("", None))[0],
                       what="the resumed reply's first words")
        turns = [(t["role"], t["status"], t["text"].strip()) for t in (await chat.state())["messages"]]
        assert turns == [("user", "processed", "deploy api"), ("assistant", "final", "Let me do that."),
                         ("assistant", "streaming", "[deploy: deployed api]")]
        gate.touch()
        await wait_for(lambda: run_finished(gw, run_id), what="the resumed run's end")
        turns = [(t["role"], t["status"], t["text"].strip()) for t in (await chat.state())["messages"]]
        assert turns == [("user", "processed", "deploy api"), ("assistant", "final", "Let me do that."),
                         ("assistant", "final", "[deploy: deployed api]")]
