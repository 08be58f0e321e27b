"""One model client per provider and model, for the daemon's life: runs share it (and its pooled,
kept-alive connection to the model server), a reload keeps it unless the provider's config
changed, and stop closes it. The model is served over HTTP by an OpenAI-compatible fake."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.daemon import Gateway

from .conftest import dump_yaml, running_gateway, wait_for, write_config
from .fakes.openai import FakeOpenAI


def _config(tmp: Path, base_url: str, instructions: str = "Be brief.") -> Path:
    return write_config(
        tmp,
        agents={"assistant": {"name": "A", "model": "local:llama-test", "instructions": instructions}},
        gateway={"providers": {"local": {"kind": "openai-chat", "base_url": base_url}}},
    )


async def _ask(gw: Gateway, s: aiohttp.ClientSession, conv: str, text: str) -> None:
    run = (await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": text})).json())["run_id"]

    async def ended() -> bool:
        stored = await gw.store.run(run)
        return stored is not None and stored.status not in ("queued", "running")

    await wait_for(ended, what=f"run {run}")
    assert (await gw.store.run(run)).status == "finished"


async def _conversation(s: aiohttp.ClientSession) -> str:
    return (await (await s.post("/api/v1/conversations", json={})).json())["id"]


def _system(request: dict[str, Any]) -> str:
    return " ".join(m["content"] for m in request["messages"] if m["role"] == "system")


async def test_runs_share_one_client_and_connection_and_a_reload_keeps_it(tmp_path: Path) -> None:
    first, second = await FakeOpenAI().start(), await FakeOpenAI().start()
    cfg = _config(tmp_path / "c", first.base_url)
    try:
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            await _ask(gw, s, await _conversation(s), "one")
            await _ask(gw, s, await _conversation(s), "two")  # another conversation, same agent
            [provider] = gw.models.providers()
            model = gw.models.get("local:llama-test", gw.config.gateway.providers)
            assert model.provider is provider  # what the runs used is what the gateway keeps
            # Both requests came on one TCP connection: kept alive in the provider's pool.
            assert len(first.requests) == 2 and len(set(first.peers)) == 1

            # A reload that changes only the agent's instructions keeps the client and its connection.
            _config(tmp_path / "c", first.base_url, instructions="Be very brief.")
            assert (await gw.reload_from_disk())[0]
            await _ask(gw, s, await _conversation(s), "three")
            assert "Be very brief." in _system(first.requests[-1])
            assert gw.models.providers() == [provider]
            assert gw.models.get("local:llama-test", gw.config.gateway.providers) is model
            assert len(set(first.peers)) == 1 and not provider.client.is_closed()

            # A changed base_url is a new client; the old one is closed (no run was using it).
            _config(tmp_path / "c", second.base_url, instructions="Be very brief.")
            assert (await gw.reload_from_disk())[0]
            assert provider.client.is_closed()
            await _ask(gw, s, await _conversation(s), "four")
            assert len(first.requests) == 3 and len(second.requests) == 1
            [fresh] = gw.models.providers()
            assert fresh is not provider and not fresh.client.is_closed()
        assert fresh.client.is_closed()  # stop closes what is left
    finally:
        await first.stop()
        await second.stop()


async def test_a_rotated_key_is_a_changed_config(tmp_path: Path, monkeypatch: Any) -> None:
    fake = await FakeOpenAI().start()
    monkeypatch.setenv("TEST_MODEL_KEY", "key-1")
    cfg = write_config(
        tmp_path / "c",
        agents={"assistant": {"name": "A", "model": "local:llama-test"}},
        gateway={"providers": {"local": {"kind": "openai-chat", "base_url": fake.base_url,
                                         "api_key": "env:TEST_MODEL_KEY"}}},
    )
    try:
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            await _ask(gw, s, await _conversation(s), "one")
            [provider] = gw.models.providers()
            assert (await gw.reload_from_disk())[0]
            assert gw.models.providers() == [provider]  # same key: kept
            monkeypatch.setenv("TEST_MODEL_KEY", "key-2")
            assert (await gw.reload_from_disk())[0]
            assert provider.client.is_closed()
            await _ask(gw, s, await _conversation(s), "two")
            assert gw.models.providers()[0].client.api_key == "key-2"
    finally:
        await fake.stop()


async def test_a_pydantic_ai_model_name_shares_its_client_too(tmp_path: Path, monkeypatch: Any) -> None:
    """`openai-chat:…` with OPENAI_BASE_URL, as a user points it at a local server."""
    fake = await FakeOpenAI().start()
    monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "not-needed")
    cfg = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "openai-chat:gpt-test"}})
    try:
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = await _conversation(s)
            await _ask(gw, s, conv, "one")
            await _ask(gw, s, conv, "two")
            [provider] = gw.models.providers()
            assert [r["model"] for r in fake.requests] == ["gpt-test", "gpt-test"]
            assert len(set(fake.peers)) == 1
            (tmp_path / "c" / "gateway.yaml").write_text(
                (tmp_path / "c" / "gateway.yaml").read_text() + dump_yaml({"logging": {"level": "debug"}}))
            assert (await gw.reload_from_disk())[0]
            assert gw.models.providers() == [provider]  # not in gateway.yaml: a reload never retires it
        assert provider.client.is_closed()
    finally:
        await fake.stop()


async def test_runs_make_no_ssl_context(tmp_path: Path) -> None:
    """Building an SSL context costs milliseconds of CPU: made once with the client, never per run."""
    fake = await FakeOpenAI().start()
    made: list[type] = []
    original = ssl.SSLContext.__dict__["__new__"]

    def counting(cls: type, *args: Any, **kwargs: Any) -> Any:
        made.append(cls)
        return original.__func__(cls, *args, **kwargs)

    try:
        async with running_gateway(_config(tmp_path / "c", fake.base_url)) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = await _conversation(s)
            await _ask(gw, s, conv, "one")  # the first run builds the client (and its SSL context)
            ssl.SSLContext.__new__ = staticmethod(counting)  # type: ignore[assignment,method-assign]
            for text in ("two", "three", "four"):
                await _ask(gw, s, conv, text)
            await _ask(gw, s, await _conversation(s), "five")
            assert made == []
    finally:
        ssl.SSLContext.__new__ = original  # type: ignore[method-assign]
        await fake.stop()


async def test_the_model_is_built_at_start_not_by_the_first_message(tmp_path: Path) -> None:
    """The first build imports the provider's SDK on the event loop (most of a second for the
    OpenAI SDK): the first message after a start or a reload must not wait behind it."""
    served = await FakeOpenAI().start()
    cfg = _config(tmp_path / "c", served.base_url)
    try:
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            [provider] = gw.models.providers()  # built before any message came
            assert not served.requests
            await _ask(gw, s, await _conversation(s), "one")
            assert gw.models.providers() == [provider]

            # A reload adding an agent on another provider builds that one at once too.
            write_config(tmp_path / "c", agents={
                "assistant": {"name": "A", "model": "local:llama-test", "instructions": "Be brief."},
                "other": {"name": "B", "model": "elsewhere:llama-test", "instructions": "Be brief."}},
                gateway={"providers": {"local": {"kind": "openai-chat", "base_url": served.base_url},
                                       "elsewhere": {"kind": "openai-chat", "base_url": served.base_url + "/"}}})
            assert (await gw.reload_from_disk())[0]
            assert len(gw.models.providers()) == 2 and provider in gw.models.providers()
    finally:
        await served.stop()


async def test_a_model_that_cannot_be_built_does_not_stop_the_start(tmp_path: Path, monkeypatch: Any,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "openai-chat:gpt-test",
                                                             "instructions": "Be brief."}})
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        assert gw.models.providers() == []
        # The operator hears of it at start, not only when someone writes.
        assert any(r.getMessage().startswith("model openai-chat:gpt-test is not ready") for r in caplog.records)
        conv = await _conversation(s)
        run = (await (await s.post(f"/api/v1/conversations/{conv}/messages", json={"text": "hi"})).json())["run_id"]

        async def ended() -> bool:
            stored = await gw.store.run(run)
            return stored is not None and stored.status not in ("queued", "running")

        await wait_for(ended, what=f"run {run}")
        stored = await gw.store.run(run)
        assert stored.status == "failed" and "OPENAI_API_KEY" in stored.reason


# People write seconds to minutes apart: longer than httpx's 5 s keep-alive expiry, which closed the connection
# between two messages so each paid a new TCP (and, to a real provider, TLS) handshake.
PAUSE = 6.5


@pytest.mark.parametrize(("between", "connections"), [("a pause", 1), ("the server closed it", 2)])
async def test_a_message_after_a_pause_reuses_the_connection_and_one_the_server_closed_never_fails(
        tmp_path: Path, between: str, connections: int) -> None:
    """After a pause longer than httpx's expiry the connection is reused (it failed on main: two); one the
    server closed while idle (its idle timeout shorter than ours) is replaced, and the message answered."""
    fake = await FakeOpenAI().start()
    try:
        async with running_gateway(_config(tmp_path / "c", fake.base_url)) as gw, aiohttp.ClientSession(gw.url) as s:
            conv = await _conversation(s)
            await _ask(gw, s, conv, "one")
            if between == "a pause":
                await asyncio.sleep(PAUSE)
            else:
                fake.close_idle_connections()
            await _ask(gw, s, conv, "two")  # finished, not failed
            assert len(fake.requests) == 2  # asked once each: none lost on a closed connection and retried
            assert len(set(fake.peers)) == connections
            turns = (await (await s.get(f"/api/v1/conversations/{conv}/messages")).json())["messages"]
            assert [t["text"] for t in turns if t["role"] == "assistant"] == ["Hello from the fake model."] * 2
    finally:
        await fake.stop()


async def test_a_burst_above_twenty_runs_reuses_its_connections_in_the_next_burst(tmp_path: Path) -> None:
    fake = await FakeOpenAI(delay=0.05).start()  # slow enough that the runs overlap
    try:
        async with running_gateway(_config(tmp_path / "c", fake.base_url)) as gw, aiohttp.ClientSession(gw.url) as s:
            convs = [await _conversation(s) for _ in range(24)]
            await asyncio.gather(*(_ask(gw, s, conv, "one") for conv in convs))
            first = set(fake.peers)
            await asyncio.sleep(PAUSE)
            await asyncio.gather(*(_ask(gw, s, conv, "two") for conv in convs))
            assert len(fake.requests) == 48
            assert set(fake.peers[24:]) <= first  # no connection opened for the second burst
    finally:
        await fake.stop()
