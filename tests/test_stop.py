"""Stop through the web API: the Stop control comes with the streaming reply, a press ends the run
within a second as `stopped`, with a line saying who stopped it and what it had done."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from gateway.runs.llm import register_model
from gateway.store import repo

from .conftest import database_url, running_gateway, wait_for, write_config
from .test_web_api import _sse

SLOW = "stop-slow"


def slow_model() -> FunctionModel:
    """A scripted model that writes a word every 0.1 s for ten seconds: a reply worth stopping."""
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for i in range(100):
            yield f"word{i} "
            await asyncio.sleep(0.1)

    return FunctionModel(stream_function=stream)


BRIEF_WORDS = 14
QUICK = "stop-quick"


def quick_model() -> FunctionModel:
    """Answers at once, in two pieces: done well within a chat platform's first-draft hold."""
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "Quick "
        yield "answer."

    return FunctionModel(stream_function=stream)


async def one_run_finished(gw: Any) -> None:
    """Wait until the gateway's one run has finished (and none other has)."""
    async def finished() -> bool:
        return [r.status for r in await gw.store.runs_in([repo.FINISHED])] == [repo.FINISHED]

    await wait_for(finished, what="the run to finish")


def brief_model(words: int = BRIEF_WORDS) -> FunctionModel:
    """`words` words, one every 0.2 s: a reply that shows its Stop control, then finishes (long enough
    for the first draft's hold, a second, and a Telegram group's next free moment after that draft)."""
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for i in range(words):
            yield f"word{i} "
            await asyncio.sleep(0.2)

    return FunctionModel(stream_function=stream)


def slow_config(path: Path, **kw: Any) -> Path:
    register_model(SLOW, slow_model)
    return write_config(path, agents={"assistant": {"name": "Slow", "model": SLOW}}, **kw)


async def test_stop_from_the_web_ends_the_run_within_a_second(tmp_path: Path) -> None:
    async with running_gateway(slow_config(tmp_path / "c")) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        events: list[dict[str, Any]] = []
        listener = asyncio.create_task(_sse(s, f"/api/v1/conversations/{conv}/events", events))
        await wait_for(lambda: gw.events._listeners.get(conv), what="SSE subscription")
        run_id = (await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "go"})).json())["run_id"]

        shown = await wait_for(lambda: [e for e in events if e["type"] == "stop_control"], what="the Stop control")
        reply = next(e for e in events if e["type"] == "delta")
        assert shown[0] == {"type": "stop_control", "message_id": reply["message_id"], "run_id": run_id, "present": True}
        await asyncio.sleep(0.3)  # pacing only: the reply streams a little before Stop is pressed

        pressed = time.monotonic()
        r = await s.post(f"/api/v1/runs/{run_id}/stop", json={})
        assert r.status == 200 and (await r.json())["stopped"] is True
        await wait_for(lambda: any(e["type"] == "run_end" for e in events), what="the run to end")
        assert time.monotonic() - pressed < 5.0  # the reply runs 10 s: cut well short (a generous bound on a busy machine)
        listener.cancel()
        assert [e["status"] for e in events if e["type"] == "run_end"] == ["stopped"]
        # The control went away with the run.
        assert [e["present"] for e in events if e["type"] == "stop_control"] == [True, False]

        run = await gw.store.run(run_id)
        assert run is not None and run.status == repo.STOPPED and run.reason == "stopped by local"
        turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
        answer = turns[-1]
        assert answer["role"] == "assistant" and answer["text"].startswith("word0 word1 ")
        assert answer["text"].endswith("_⏹ Stopped by local; before that I wrote what is above._")
        assert "finished" not in answer["text"] and answer["status"] == "stopped"

        # Nothing left to stop: said so, and nothing changes.
        r = await s.post(f"/api/v1/runs/{run_id}/stop", json={})
        assert r.status == 409 and (await r.json())["stopped"] is False
        r = await s.post("/api/v1/runs/nope/stop", json={})
        assert r.status == 404


async def test_a_fast_reply_leaves_no_stop_control_behind(config_dir: Path) -> None:
    async with running_gateway(config_dir) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        events: list[dict[str, Any]] = []
        listener = asyncio.create_task(_sse(s, f"/api/v1/conversations/{conv}/events", events))
        await wait_for(lambda: gw.events._listeners.get(conv), what="SSE subscription")
        await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hello"})
        await wait_for(lambda: any(e["type"] == "run_end" for e in events), what="the run to end")
        # The control is taken off with the reply's end: wait for that event, not for a window after it.
        await wait_for(lambda: [e for e in events if e["type"] == "stop_control" and not e["present"]],
                       what="the Stop control taken off")
        listener.cancel()
        controls = [e["present"] for e in events if e["type"] == "stop_control"]
        assert controls == [True, False]
        assert [e["status"] for e in events if e["type"] == "run_end"] == ["finished"]


async def test_a_stop_pressed_on_another_replica_reaches_the_run(tmp_path: Path) -> None:
    """Two gateways on one database: the one that did not claim the run stores the request, and
    the one holding the run's lease stops it at its next sweep."""
    cfg = slow_config(tmp_path / "c")
    async with running_gateway(cfg) as a, running_gateway(cfg) as b, \
            aiohttp.ClientSession(a.url) as sa, aiohttp.ClientSession(b.url) as sb:
        conv = (await (await sa.post("/api/v1/conversations", json={})).json())["id"]
        run_id = (await (await sa.post(f"/api/v1/conversations/{conv}/messages", json={"text": "go"})).json())["run_id"]
        await wait_for(lambda: (a.runner.live(run_id) or ("", None))[0], what="the reply to stream on a")

        r = await sb.post(f"/api/v1/runs/{run_id}/stop", json={})
        body = await r.json()
        assert r.status == 200 and body["stopped"] is True and "another gateway process" in body["message"]
        assert (await a.store.run(run_id)).status == repo.RUNNING  # type: ignore[union-attr]

        await a.sweep()  # what its sweep loop does every SWEEP_EVERY seconds

        async def stopped() -> bool:
            run = await a.store.run(run_id)
            return run is not None and run.status == repo.STOPPED and run.reason == "stopped by local"

        await wait_for(stopped, timeout=1.0, what="the run to stop on a")
        assert await a.store.capability_state.items("stop", "requests") == {}


WAITING = "stop-waiting"


@pytest.mark.parametrize("door", ["typed", "api"])
@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_a_stop_of_a_message_waiting_for_a_slot_ends_it_before_its_model_is_asked(
        tmp_path: Path, engine: str, door: str) -> None:
    """One run at a time: a question in one conversation runs, one in another waits for the slot. `/stop` there
    (or the API's stop of its run) ends it at once: the stopped line is posted, the model is never asked it, and
    it is kept as asked but not answered: the conversation's next question runs with it in its history."""
    go, asked = asyncio.Event(), []

    def model() -> FunctionModel:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            asked.append([str(p.content) for m in messages if isinstance(m, ModelRequest)
                          for p in m.parts if isinstance(p, UserPromptPart)])
            if asked[-1][-1] == "busy":
                await go.wait()
            yield "done"

        return FunctionModel(stream_function=stream)

    register_model(WAITING, model)
    async with database_url(engine, tmp_path / "c") as url:
        cfg = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": WAITING}},
                           gateway={"database": {"url": url}, "limits": {"concurrent_runs": 1}})
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            busy, waiting = [(await (await s.post("/api/v1/conversations", json={})).json())["id"] for _ in range(2)]
            await s.post(f"/api/v1/conversations/{busy}/messages", json={"text": "busy"})
            await wait_for(lambda: asked, what="the first run to ask its model")
            sent = await (await s.post(f"/api/v1/conversations/{waiting}/messages", json={"text": "waiting"})).json()
            if door == "typed":
                r = await s.post(f"/api/v1/conversations/{waiting}/messages", json={"text": "/stop"})
                assert r.status == 200, await r.text()
            else:
                r = await s.post(f"/api/v1/runs/{sent['run_id']}/stop", json={})
                assert (r.status, await r.json()) == (200, {"stopped": True, "message": "Stopped."})
            run = await gw.store.run(sent["run_id"])
            assert run is not None and (run.status, run.reason) == (repo.STOPPED, "stopped by local")
            turns = (await (await s.get(f"/api/v1/conversations/{waiting}/messages")).json())["messages"]
            assert [(t["role"], t["text"]) for t in turns if t["role"] != "command"][:2] == [
                ("user", "waiting"), ("notice", "⏹ Stopped by local; I had not done anything yet.")]
            r = await s.post(f"/api/v1/runs/{sent['run_id']}/stop", json={})
            assert (r.status, (await r.json())["message"]) == (409, "That reply has already ended.")

            go.set()
            await one_run_finished(gw)
            again = await (await s.post(f"/api/v1/conversations/{waiting}/messages", json={"text": "again"})).json()

            async def answered() -> bool:
                row = await gw.store.run(again["run_id"])
                return row is not None and row.status == repo.FINISHED

            await wait_for(answered, what="the next question's run")
            assert asked == [["busy"], ["waiting", "again"]]  # the stopped one never asked; then it is history
