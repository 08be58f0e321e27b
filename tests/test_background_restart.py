"""A background delegation cut by a crash: the real daemon in its own process, SIGKILLed while the delegate is
still streaming from the (fake, slow) model. The next start ends the run as partial, and its report still
arrives in the conversation — a report card, then the agent's continuing reply — through the web API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from tests.adapters.stopping import Daemon
from tests.conftest import wait_for, write_config
from tests.fakes.openai import FakeOpenAI


async def test_a_crash_during_a_background_run_yields_a_partial_report_after_the_restart(tmp_path: Path) -> None:
    slow = await FakeOpenAI(chunks=["word "] * 600, delay=0.05).start()  # half a minute of answer
    directory = tmp_path / "config"
    directory.mkdir()
    daemon = Daemon(directory, env={"OPENAI_BASE_URL": slow.base_url, "OPENAI_API_KEY": "not-needed"})
    # The demo model calls the tool a message names, with its key=value arguments: here, `task`.
    write_config(directory, agents={
        "assistant": {"name": "Assistant", "model": "demo", "subagents": ["researcher"],
                      "capabilities": [{"id": "subagents", "config": {"mode": "async"}}]},
        "researcher": {"name": "Researcher", "model": "openai-chat:slow-model", "description": "Finds things out"},
    }, bindings={"web": {"platform": "web", "agent": "assistant"}},
        gateway={"http": {"listen": f"127.0.0.1:{daemon.port}"}})
    try:
        await daemon.start()
        await daemon.wait_ready()
        async with aiohttp.ClientSession(f"http://127.0.0.1:{daemon.port}") as http:
            conv = (await (await http.post("/api/v1/conversations", json={})).json())["id"]

            async def messages() -> list[dict[str, Any]]:
                async with http.get(f"/api/v1/conversations/{conv}/messages") as r:
                    return list((await r.json())["messages"])

            r = await http.post(f"/api/v1/conversations/{conv}/messages",
                                json={"text": 'task agent=researcher prompt="compare the three vendors"'})
            assert r.status == 202, await r.text()
            turns = await wait_for(lambda: _final(messages(), 2), timeout=30, what="the first turn to end")
            assert "Started in the background as run" in turns[1]["text"]
            await wait_for(lambda: len(slow.requests) >= 1, what="the delegate to call its model")

            assert daemon.proc is not None
            daemon.proc.kill()  # no shutdown of any kind: the run is left `running` in the database
            await daemon.proc.wait()
            await daemon.start()
            await daemon.wait_ready()

            turns = await wait_for(lambda: _final(messages(), 4), timeout=30, what="the report and what follows")
            assert [t["role"] for t in turns] == ["user", "assistant", "report", "assistant"]
            report = turns[2]["text"]
            assert report.startswith("📋 Report from background run ") and "(researcher, started by " in report
            assert "partial: the gateway restarted while it worked" in report
            assert turns[3]["run_id"] == turns[2]["run_id"] and turns[3]["status"] == "final"
    finally:
        await daemon.close()
        await slow.stop()


async def _final(pending: Any, n: int) -> list[dict[str, Any]] | None:
    turns = await pending
    done = [t for t in turns if t["status"] in ("final", "processed")]
    return turns if len(turns) >= n and len(done) == len(turns) else None
