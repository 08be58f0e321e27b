"""A restarted daemon's first message does no first-time work: the warm-up after start (gateway/runs/warm_up.py)
did it, off the event loop. The stall itself is a time (bench/startup.py prints it); what is tested here is the
mechanism: in a fresh interpreter, once the warm-up has ended, the first message imports no module, and the
warm-up imported the provider SDK the config names and no other."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bindings.loader import load_config
from gateway import extensions
from gateway.daemon import Gateway
from gateway.runs import warm_up as warm_up_module
from gateway.runs.llm import register_model
from gateway.runs.models_cache import ModelCache

from .conftest import DEFAULT_AGENT, ROOT, run_finished, running_gateway, wait_for, write_config
from .fakes.openai import FakeOpenAI

# In a fresh interpreter: the daemon started, its warm-up awaited, then one message through the web API;
# prints what the message imported and which provider SDKs were loaded.
FIRST_MESSAGE = """
import asyncio, json, sys
import aiohttp
from bindings.loader import load_config
from gateway import extensions
from gateway.daemon import Gateway

async def main():
    extensions.register_checks()
    gw = Gateway(load_config(sys.argv[1]), listen="127.0.0.1:0")
    await gw.start()
    try:
        await gw.warmed()
        async with aiohttp.ClientSession(gw.url) as s:
            conversation = (await (await s.post("/api/v1/conversations", json={})).json())["id"]  # the client warmed too
            before = set(sys.modules)
            async with gw.events.listen(conversation) as events:
                run = (await (await s.post(f"/api/v1/conversations/{conversation}/messages",
                                           json={"text": "hello"})).json())["run_id"]
                while (event := await asyncio.wait_for(events.get(), 60))["type"] != "run_end" or event["run_id"] != run:
                    pass
        print(json.dumps({"status": event["status"], "imported": sorted(set(sys.modules) - before),
                          "sdks": sorted(m for m in ("openai", "anthropic") if m in sys.modules),
                          "price_table": "genai_prices.data" in sys.modules}))
    finally:
        await gw.stop()

asyncio.run(main())
"""

# In a fresh interpreter: the daemon's loop made, then every descriptor but `free` taken before the warm-up's
# thread makes its loop (the slow-clients test's daemon, out of descriptors, met that on a slow machine).
OUT_OF_DESCRIPTORS = """
import asyncio, gc, logging, os, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(levelname)s %(message)s")
from bindings.loader import load_config
from gateway.runs.models_cache import ModelCache
from gateway.runs.warm_up import warm_up

async def main():
    config = load_config(sys.argv[1])
    await asyncio.to_thread(lambda: None)  # the default executor's thread, as a started daemon has it
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    for _ in range(int(sys.argv[2])):
        os.close(held.pop())
    try:
        await warm_up(config, ModelCache())
    finally:
        for fd in held:
            os.close(fd)
    gc.collect()  # whatever the failure left behind is finalized now, before the interpreter's exit

asyncio.run(main())
"""


async def _first_message(config: Path, env: dict[str, str]) -> dict[str, Any]:
    # Not subprocess.run: the fake model server answers on this test's event loop meanwhile.
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FIRST_MESSAGE, str(config), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "AGENT_GATEWAY_MODEL")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


async def test_the_first_message_on_the_offline_model_imports_nothing_and_no_provider_sdk(tmp_path: Path) -> None:
    """The shipped agent's capabilities (clock, memory_files) on the offline demo: before the warm-up, the first
    message imported genai-prices' price table and anyio's asyncio backend on the loop. The table is never
    loaded: it prices no offline model (gateway/runs/llm.py)."""
    config = write_config(tmp_path / "c", agents={"assistant": {
        "name": "A", "model": "demo", "instructions": "Be brief.",
        "capabilities": [{"id": "clock"}, {"id": "memory_files"}]}})
    result = await _first_message(config, _env())
    assert result == {"status": "finished", "imported": [], "sdks": [], "price_table": False}


async def test_the_first_message_on_an_openai_compatible_model_imports_nothing_and_not_anthropic(tmp_path: Path) -> None:
    served = await FakeOpenAI().start()
    try:
        config = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "local:llama-test",
                                                                    "instructions": "Be brief."}},
                              gateway={"providers": {"local": {"kind": "openai-chat", "base_url": served.base_url}}})
        result = await _first_message(config, _env())
        assert len(served.requests) == 1  # the warm-up itself never calls the model: only the message did
    finally:
        await served.stop()
    assert result == {"status": "finished", "imported": [], "sdks": ["openai"], "price_table": True}  # by the warm-up


async def test_a_model_a_run_built_while_the_warm_up_was_building_is_kept_and_the_warm_ups_closed(tmp_path: Path) -> None:
    """The warm-up builds in a thread on a cache of its own; what a run built on the loop meanwhile wins."""
    served = await FakeOpenAI().start()
    try:
        config = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "local:llama-test"}},
                              gateway={"providers": {"local": {"kind": "openai-chat", "base_url": served.base_url}}})
        providers = load_config(config).gateway.providers
        cache, scratch = ModelCache(), ModelCache()
        await asyncio.to_thread(scratch._build, ["local:llama-test"], providers)  # as `warm` does, in its thread
        ours = cache.get("local:llama-test", providers)  # a run, on the loop, before the warm-up adopted
        await cache._adopt(scratch)
        assert cache.get("local:llama-test", providers) is ours
        assert cache.providers() == [ours.provider]
        [theirs] = scratch.providers()
        assert theirs is not ours.provider and theirs.client._client.is_closed  # type: ignore[attr-defined]
        await cache.close()
    finally:
        await served.stop()


async def test_a_message_during_the_warm_up_is_answered_with_the_one_model_kept(tmp_path: Path) -> None:
    served = await FakeOpenAI().start()
    try:
        config = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "local:llama-test"}},
                              gateway={"providers": {"local": {"kind": "openai-chat", "base_url": served.base_url}}})
        extensions.register_checks()
        gw = Gateway(load_config(config))
        await gw.start()  # not running_gateway: it would wait for the warm-up
        try:
            async with aiohttp.ClientSession(gw.url) as s:
                conversation = await _conversation(s)
                async with gw.events.listen(conversation) as events:
                    await s.post(f"/api/v1/conversations/{conversation}/messages", json={"text": "hello"})
                    event = await _run_end(events)
            assert event["status"] == "finished"
            await gw.warmed()
            [provider] = gw.models.providers()
            assert gw.models.get("local:llama-test", gw.config.gateway.providers).provider is provider
        finally:
            await gw.stop()
    finally:
        await served.stop()


async def test_a_message_during_the_warm_up_waits_for_its_thread_and_does_not_do_its_work_on_the_loop(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A run that came while the warm-up's thread imported what a first run imports did the same on the loop: with
    a module the thread was still importing (the OpenAI SDK), the loop itself waited for the thread on Python's
    import lock, 11.6 s on a loaded machine (tests/chaos/test_database_faults.py: /readyz unanswered). Here the
    thread's part is held until the run is seen waiting for it (or the model asked: before the fix)."""
    held, asked = threading.Event(), []

    def model() -> FunctionModel:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            asked.append(held.is_set())
            yield "Hello."
        return FunctionModel(stream_function=stream)

    register_model("warm-up-held", model)
    config = write_config(tmp_path / "c", agents={"assistant": {"name": "A", "model": "warm-up-held"}})
    extensions.register_checks()
    gw = Gateway(load_config(config))
    gw.warm_ups.append(lambda config: held.wait(60))  # an extension's part of the warm-up, in its thread
    caplog.set_level(logging.DEBUG, logger="gateway.runs.runner")
    await gw.start()  # not running_gateway: it would wait for the warm-up
    try:
        async with aiohttp.ClientSession(gw.url) as s:
            conversation = await _conversation(s)
            async with gw.events.listen(conversation) as events:
                await s.post(f"/api/v1/conversations/{conversation}/messages", json={"text": "hello"})
                await wait_for(lambda: asked or _logged(caplog, "run waits for the warm-up"),
                               what="the run to wait for the warm-up (or to ask the model)")
                held.set()
                event = await _run_end(events)
        assert event["status"] == "finished"
        assert asked == [True], "the model was asked while the warm-up's thread was still at work"
    finally:
        held.set()
        await gw.stop()


def _logged(caplog: pytest.LogCaptureFixture, message: str) -> bool:
    return any(r.getMessage() == message for r in caplog.records)


@pytest.mark.parametrize("free", [0, 1], ids=["none-free", "one-free"])
async def test_a_warm_up_out_of_descriptors_logs_one_line_and_no_traceback(tmp_path: Path, free: int) -> None:
    """None free: the thread loop's selector fails; one free: the selector takes it and the loop's self-pipe (a
    socketpair) fails. Either way one warning line. Before the fix, the half-built loop's `__del__` raised
    AttributeError into the unraisable hook ("Exception ignored in ... Traceback" on stderr) and the rehearsal's
    coroutine, made before the loop, was never awaited (a RuntimeWarning)."""
    config = write_config(tmp_path / "c")
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", OUT_OF_DESCRIPTORS, str(config), str(free), cwd=ROOT, env=_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    assert out.decode().splitlines() == ["WARNING warm-up failed: OSError: [Errno 24] Too many open files"]
    assert err.decode() == ""


async def test_a_second_gateway_in_one_process_answers_without_rehearsing_its_agents_in_the_thread_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the thread's rehearsal builds is the process's: a gateway started again in the same process (a
    restart inside a test, the suite's next test) rehearses only on its loop, and still answers."""
    loops: list[asyncio.AbstractEventLoop] = []  # the rehearsal threads' loops, each made by the real `_thread_loop`
    make_loop = warm_up_module._thread_loop

    def counted() -> asyncio.AbstractEventLoop:
        loops.append(make_loop())
        return loops[-1]
    monkeypatch.setattr(warm_up_module, "_thread_loop", counted)
    agent = f"fresh-{uuid.uuid4().hex[:8]}"  # a name no earlier gateway of this process rehearsed
    config = write_config(tmp_path / "c", agents={agent: DEFAULT_AGENT}, bindings={"web": {"platform": "web", "agent": agent}})
    for start in (1, 2):
        async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
            assert len(loops) == 1, f"start {start}"
            conversation = await _conversation(s)
            run = (await (await s.post(f"/api/v1/conversations/{conversation}/messages",
                                       json={"text": "hello"})).json())["run_id"]
            await wait_for(lambda: run_finished(gw, run), what="the answer")


async def _conversation(s: aiohttp.ClientSession) -> str:
    return str((await (await s.post("/api/v1/conversations", json={})).json())["id"])


async def _run_end(events: asyncio.Queue[dict[str, Any]]) -> dict[str, Any]:
    """The next run's end the conversation's event stream carries."""
    while (event := await asyncio.wait_for(events.get(), 60))["type"] != "run_end":
        pass
    return event


async def test_the_warm_up_rehearses_no_run_on_the_daemons_loop_and_starts_that_loops_worker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole rehearsed run on the loop (11-13 ms of its CPU at every start) made the first run on that loop
    no cheaper than starting the loop's worker thread does: the rest of a first run's work is the process's."""
    callers: list[threading.Thread] = []  # the threads the rehearsal's offline model was asked from
    script = warm_up_module._script

    def counted(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        callers.append(threading.current_thread())
        return script(messages, info)
    monkeypatch.setattr(warm_up_module, "_script", counted)
    loop = asyncio.get_running_loop()
    config = write_config(tmp_path / "c")
    for start in (1, 2):  # the first may rehearse in the thread (a process's first gateway); neither on the loop
        async with running_gateway(config) as gw, aiohttp.ClientSession(gw.url) as s:
            assert threading.current_thread() not in callers, f"start {start}"
            workers = [t for t in threading.enumerate() if type(t).__name__ == "WorkerThread" and t.is_alive()
                       and getattr(t, "loop", None) is loop]
            assert workers, f"start {start}: no worker thread of this loop's"
            conversation = await _conversation(s)
            run = (await (await s.post(f"/api/v1/conversations/{conversation}/messages",
                                       json={"text": "hello"})).json())["run_id"]
            await wait_for(lambda: run_finished(gw, run), what="the answer")
