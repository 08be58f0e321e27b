"""A real model client (pydantic-ai's OpenAI chat model) talking to an OpenAI-compatible server
through a provider base_url, as with Ollama, vLLM or LM Studio."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from .conftest import running_gateway, wait_for, write_config
from .fakes.openai import FakeOpenAI


def _config(tmp: Path, base_url: str) -> Path:
    return write_config(
        tmp,
        agents={"assistant": {"name": "A", "model": "local:llama-test", "instructions": "Be brief."}},
        gateway={"providers": {"local": {"kind": "openai-chat", "base_url": base_url}}},
        bindings={"web": {"platform": "web", "agent": "assistant", "prompt": "Web binding prompt."}},
    )


async def _final(s: aiohttp.ClientSession, conv: str) -> list[dict]:
    turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
    return [t for t in turns if t["role"] == "assistant" and t["status"] != "streaming"]


async def test_openai_compatible_provider(tmp_path: Path) -> None:
    fake = await FakeOpenAI().start()
    try:
        async with running_gateway(_config(tmp_path / "c", fake.base_url)) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
            run = (await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hi"})).json())["run_id"]
            [reply] = await wait_for(lambda: _final(s, conv))
            assert reply["text"] == "Hello from the fake model."
            [request] = fake.requests
            assert request["model"] == "llama-test" and request["stream"] is True
            system = " ".join(m["content"] for m in request["messages"] if m["role"] == "system")
            assert "Be brief." in system and "Web binding prompt." in system  # the binding's prompt is appended
            stored = await gw.store.run(run)
            assert stored.status == "finished" and stored.requests == 1 and stored.output_tokens == 5
    finally:
        await fake.stop()


async def test_unreachable_or_failing_model_is_told_in_the_chat(tmp_path: Path) -> None:
    fake = await FakeOpenAI().start()
    fake.status = 500
    try:
        async with running_gateway(_config(tmp_path / "c", fake.base_url)) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
            run = (await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hi"})).json())["run_id"]
            [reply] = await wait_for(lambda: _final(s, conv))
            assert "The model service answered with an error (HTTP 500)" in reply["text"]
            stored = await gw.store.run(run)
            assert stored.status == "failed" and stored.reason == "model HTTP 500"
    finally:
        await fake.stop()
    # Nothing listens on that port any more: "could not be reached".
    async with running_gateway(_config(tmp_path / "d", fake.base_url)) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hi"})
        [reply] = await wait_for(lambda: _final(s, conv), timeout=30)
        assert "could not be reached" in reply["text"] or "answered with an error" in reply["text"]


async def test_missing_key_is_told_in_the_chat(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "openai-chat:gpt-4o"}})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        conv = (await (await s.post("/api/v1/conversations", json={})).json())["id"]
        run = (await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hi"})).json())["run_id"]
        [reply] = await wait_for(lambda: _final(s, conv))
        assert reply["text"].startswith("_I can't answer: model 'openai-chat:gpt-4o' cannot be used")
        assert "An admin needs to configure the model" in reply["text"]
        assert (await gw.store.run(run)).status == "failed"
