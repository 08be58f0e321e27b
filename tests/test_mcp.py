"""MCP servers as an agent's tools, end to end: a real MCP server (tests/support/mcp_server.py, written
with the `mcp` package) over stdio and over streamable HTTP, a real gateway, the web API."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from .conftest import run_finished, running_gateway, wait_for, write_config
from .support import plugin_mcp  # noqa: F401  (registers the test:mcp model)
from .support.mcp_server import serve_http
from .test_approvals import Chat, approved_after_restart

SERVER = Path(__file__).resolve().parent / "support" / "mcp_server.py"


def stdio(log: Path, name: str = "tracker", **extra: Any) -> dict[str, Any]:
    return {"name": name, "command": sys.executable, "args": [str(SERVER)], "env": {"MCP_LOG": str(log)}, **extra}


def config(tmp: Path, servers: list[dict[str, Any]]) -> Path:
    return write_config(tmp, agents={"ops": {"name": "Ops", "model": "test:mcp", "mcp_servers": servers}},
                        bindings={"web": {"platform": "web", "agent": "ops"}},
                        gateway={"plugins": ["tests.support.plugin_mcp"]})


def ran(log: Path) -> list[tuple[str, dict[str, Any]]]:
    if not log.exists():
        return []
    return [(r["tool"], r["args"]) for r in map(json.loads, log.read_text().splitlines())]


def _connected(gw: Any) -> bool:
    """No server of the gateway is still on its first connection attempt."""
    return gw.mcp is None or all(s["state"] != "connecting" for s in gw.mcp.readiness()["mcp"].values())


async def ask(gw: Any, chat: Chat, text: str) -> str:
    """Send `text` once the servers' first connections have ended, wait for the run, return its reply.

    A run waits for a server still starting only briefly (pool.FIRST_WAIT), then answers without
    it; on a loaded machine a test server's start can take longer than that. These tests are about
    what a connected server does, so they wait for the connection; the bounded wait itself is
    tested in tests/test_mcp_liveness.py."""
    await wait_for(lambda: _connected(gw), what="the MCP servers' first connections")
    sent = await chat.say(text)
    await wait_for(lambda: run_finished(gw, sent["run_id"]), what=f"the run for {text!r}")
    return (await chat.replies())[-1]


async def test_stdio_tools_are_prefixed_and_deny_is_never_offered(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, tools={"status": "allow", "drop_database": "deny", "stauts": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        assert await ask(gw, chat, "tools") == ("tools: tracker_chart, tracker_deploy, tracker_explode, tracker_grow, "
                                                "tracker_read_resource, tracker_status, tracker_whoami")
        assert await ask(gw, chat, "tracker_status api") == "[tracker_status success: api is green]"
        assert await ask(gw, chat, "tracker_drop_database api") == "echo: tracker_drop_database api"
        assert ran(log) == [("status", {"service": "api"})]
    # A `tools:` entry naming nothing is a warning once the server's tools are first listed.
    [warning] = [r.getMessage() for r in caplog.records if "names no tool" in r.getMessage()]
    assert warning == ("agent ops: mcp_servers tracker: tools: 'stauts' names no tool the server offers (it offers: "
                       "chart, deploy, drop_database, explode, grow, status, whoami)")


async def test_http_ask_tool_parks_and_runs_once_after_approval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    log = tmp_path / "mcp.log"
    monkeypatch.setenv("MCP_LOG", str(log))  # the in-process server records here
    monkeypatch.setenv("TRACKER_AUTHORIZATION", "Bearer s3cret-token-value")
    caplog.set_level("DEBUG")
    async with serve_http(token="s3cret-token-value") as url:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": url,
                                       "headers": {"Authorization": "env:TRACKER_AUTHORIZATION"}}])
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            sent = await chat.say("tracker_deploy api")
            card = await chat.card()
            assert await chat.run_status(gw, sent["run_id"]) == "parked"
            assert ran(log) == [], "an ask tool ran before anyone decided"
            [item] = card["items"]
            assert item["tool"] == "tracker_deploy" and item["capability"] == "mcp:tracker"
            assert json.loads(item["arguments"]) == {"service": "api"}
            status, _ = await chat.decide(item["approval_id"], "approve")
            assert status == 200
            await wait_for(lambda: run_finished(gw, sent["run_id"]))
            assert ran(log) == [("deploy", {"service": "api"})]
            assert (await chat.replies())[-1] == "[tracker_deploy success: deployed api]"
            # A second click changes nothing; the tool ran once.
            status, _ = await chat.decide(item["approval_id"], "approve")
            assert status == 409
            assert [d["tool"] for d in (await chat.state())["decisions"]] == ["tracker_deploy"]
            assert ran(log) == [("deploy", {"service": "api"})]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "tracker" in logged and "s3cret-token-value" not in logged


async def test_server_down_leaves_the_run_working_and_says_so(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with serve_http() as up:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": up, "tools": {"status": "allow"}},
                                      {"name": "wiki", "url": f"http://127.0.0.1:{port}/mcp"}])
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            reply = await ask(gw, chat, "tracker_status api")
            assert reply.startswith("_The wiki tools are not available right now (MCP server unavailable: "), reply
            assert "I'll answer without them._" in reply
            assert reply.endswith("[tracker_status success: api is green]")
            r = await s.get("/readyz")
            ready = await r.json()
            assert r.status == 200 and ready["ready"] is True  # a server down never makes the gateway unready
            assert ready["mcp"]["ops/tracker"]["state"] == "up"
            wiki = ready["mcp"]["ops/wiki"]
            assert wiki["state"] in ("down", "connecting") and wiki["connects"] == 0
            # It is retried with backoff: once it listens, it is picked up without a restart.
            async with serve_http(port):
                await wait_for(lambda: gw.mcp.existing("ops", "wiki").state == "up", timeout=30, what="wiki up")
                assert "wiki_status" in await ask(gw, chat, "tools")
                assert "not available" not in (await chat.replies())[-1]


async def test_restarted_stdio_server_is_picked_up_again(tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, tools={"whoami": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        first = await ask(gw, chat, "tracker_whoami api")
        pid = int(first.removeprefix("[tracker_whoami success: pid ").removesuffix("]"))
        connection = gw.mcp.existing("ops", "tracker")
        assert connection.connects == 1
        os.kill(pid, signal.SIGKILL)
        await wait_for(lambda: connection.connects == 2 and connection.state == "up", timeout=30,
                       what="the stdio server started again")
        second = await ask(gw, chat, "tracker_whoami api")
        assert second.startswith("[tracker_whoami success: pid ") and str(pid) not in second


async def test_results_text_images_and_errors(tmp_path: Path) -> None:
    async with serve_http() as url:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": url,
                                       "tools": {"chart": "allow", "explode": "allow", "status": "allow"}}])
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            assert await ask(gw, chat, "tracker_status api") == "[tracker_status success: api is green]"
            assert await ask(gw, chat, "tracker_chart api") == "[tracker_chart success: <image image/png, 70 bytes>]"
            assert await ask(gw, chat, "tracker_explode api") == ("[tracker_explode failed: Error executing tool explode: "
                                                                     "the api tracker is on fire]")


async def test_tool_list_is_refreshed_when_the_server_announces_a_change(tmp_path: Path) -> None:
    async with serve_http() as url:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": url, "tools": {"grow": "allow"}}])
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            assert "tracker_api_report" not in await ask(gw, chat, "tools")
            assert await ask(gw, chat, "tracker_grow api") == "[tracker_grow success: added api_report]"
            connection = gw.mcp.existing("ops", "tracker")
            await wait_for(lambda: "api_report" in {t.name for t in connection.tools}, what="the list refreshed")
            assert connection.connects == 1  # refreshed on the same connection
            assert "tracker_api_report" in await ask(gw, chat, "tools")


async def test_a_denied_tool_cannot_be_called_even_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "mcp.log"
    monkeypatch.setenv("MCP_LOG", str(log))
    async with serve_http() as url:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": url, "tools": {"drop_database": "deny"}}])
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            reply = await ask(gw, chat, "call! tracker_drop_database api")
            assert reply.startswith("[tracker_drop_database retried: Unknown tool name: 'tracker_drop_database'")
            assert (await chat.state())["cards"] == []
    assert ran(log) == []


async def test_conversation_modes_apply_to_mcp_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "mcp.log"
    monkeypatch.setenv("MCP_LOG", str(log))
    async with serve_http() as url:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": url, "tools": {"status": "allow"}}])
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            # "Ask for every tool" gates even a tool the agent file allows.
            assert (await s.post(f"/api/v1/conversations/{chat.conv}/modes", json={"ask_every_tool": True})).status == 200
            sent = await chat.say("tracker_status api")
            card = await chat.card()
            assert card["items"][0]["tool"] == "tracker_status"
            await chat.decide(card["items"][0]["approval_id"], "deny")
            await wait_for(lambda: run_finished(gw, sent["run_id"]))
            assert ran(log) == []
            # "Approve all" waives an ask tool.
            assert (await s.post(f"/api/v1/conversations/{chat.conv}/modes", json={"approve_all": True})).status == 200
            assert await ask(gw, chat, "tracker_deploy api") == "[tracker_deploy success: deployed api]"
            assert len((await chat.state())["cards"]) == 1
            assert ran(log) == [("deploy", {"service": "api"})]


async def test_approval_survives_a_restart_and_the_tool_runs_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "mcp.log"
    monkeypatch.setenv("MCP_LOG", str(log))
    async with serve_http() as url:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": url}])
        async with approved_after_restart(cfg, "tracker_deploy api") as (_, chat):
            assert (await chat.replies())[-1] == "[tracker_deploy success: deployed api]"
    assert ran(log) == [("deploy", {"service": "api"})]


async def test_a_rejected_token_leaves_the_server_down_and_the_secret_out_of_sight(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TRACKER_AUTHORIZATION", "Bearer wrong-secret-value")
    caplog.set_level("DEBUG")
    async with serve_http(token="right-secret-value") as url:
        cfg = config(tmp_path / "c", [{"name": "tracker", "url": url + "?tenant=acme&key=query-secret-value",
                                       "headers": {"Authorization": "env:TRACKER_AUTHORIZATION"}}])
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            reply = await ask(gw, chat, "tools")
            assert reply.startswith("_The tracker tools are not available right now (MCP server unavailable: "), reply
            assert reply.endswith("tools:")  # no tools at all
            tracker = (await (await s.get("/readyz")).json())["mcp"]["ops/tracker"]
            assert tracker["state"] in ("down", "connecting") and tracker["connects"] == 0
            shown = json.dumps(tracker) + reply
    # Ours at every level, and libraries' at the levels the daemon lets through (their request logs are
    # kept at WARNING by gateway.ops.logs, as they print URLs).
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("gateway") or r.levelno >= 30)
    assert "MCP server ops/tracker (http://127.0.0.1:" in logged and "cannot be reached" in logged
    for secret in ("wrong-secret-value", "right-secret-value", "query-secret-value"):
        assert secret not in logged and secret not in shown


async def test_a_capability_tool_keeps_its_name_against_an_mcp_tool(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from .support.plugin_ops import RAN

    RAN.clear()
    log = tmp_path / "mcp.log"
    monkeypatch.setenv("MCP_LOG", str(log))
    async with serve_http() as url:
        cfg = write_config(tmp_path / "c", agents={"ops": {
            "name": "Ops", "model": "test:mcp",
            "capabilities": [{"id": "test_ops", "tool_overrides": {"deploy": {"name": "tracker_deploy"}}}],
            "mcp_servers": [{"name": "tracker", "url": url}]}},
            bindings={"web": {"platform": "web", "agent": "ops"}},
            gateway={"plugins": ["tests.support.plugin_mcp", "tests.support.plugin_ops"]})
        async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
            chat = await Chat(s).open()
            assert (await ask(gw, chat, "tools")).count("tracker_deploy") == 1
            sent = await chat.say("tracker_deploy api")
            card = await chat.card()
            assert card["items"][0]["capability"] == "test_ops"
            await chat.decide(card["items"][0]["approval_id"], "approve")
            await wait_for(lambda: run_finished(gw, sent["run_id"]))
    assert RAN == [("deploy", "api")] and ran(log) == []


async def test_a_binary_that_is_neither_image_nor_pdf_reaches_the_model_as_a_note(tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, args=[str(SERVER), "--extras"], tools={"archive": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        assert await ask(gw, chat, "tracker_archive api") == (
            "[tracker_archive success: [The tool returned a file of type application/gzip (32 bytes); files of this "
            "type are not read, so its contents are not shown.]]")


async def test_a_stdio_server_sees_only_its_own_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/security.md, MCP servers: the gateway's keys never reach a server's environment."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-gateway-secret")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-gateway-secret")
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, args=[str(SERVER), "--extras"], tools={"environment": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        reply = await ask(gw, chat, "tracker_environment api")
    names = set(reply.removeprefix("[tracker_environment success: ").removesuffix("]").split())
    inherited = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM"}
    assert "MCP_LOG" in names and not names - inherited - {"MCP_LOG", "LC_CTYPE"}, names  # LC_CTYPE: Python's own


async def test_a_long_tools_progress_is_the_pages_status_line(tmp_path: Path) -> None:
    from .test_web_api import _sse

    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, args=[str(SERVER), "--extras"], tools={"slow": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        events: list[dict[str, Any]] = []
        listener = asyncio.create_task(_sse(s, f"/api/v1/conversations/{chat.conv}/events", events))
        await wait_for(lambda: gw.events._listeners.get(chat.conv), what="SSE subscription")
        assert await ask(gw, chat, "tracker_slow api") == "[tracker_slow success: api done]"
        await wait_for(lambda: any(e["type"] == "run_end" for e in events), what="run end")
        listener.cancel()
    assert [e["text"] for e in events if e["type"] == "status"] == [
        "using tracker_slow…", "tracker: 20 % (crunching)", "tracker: 40 % (crunching)", "tracker: 60 % (crunching)",
        "tracker: 80 % (crunching)", "tracker: 100 %"]


async def test_a_resource_link_is_read_back_through_a_gated_read_resource(tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, args=[str(SERVER), "--extras"], tools={"linked": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        assert "tracker_read_resource" in await ask(gw, chat, "tools")
        assert await ask(gw, chat, "tracker_linked api") == (  # with its name and type, and how to read it
            "[tracker_linked success: [resource link: api report (text/plain): tracker://reports/api; read it with "
            "read_resource]]")
        sent = await chat.say('tracker_read_resource {"uri": "tracker://reports/api"}')
        card = await chat.card()  # gated like the server's tools: ask, unless the agent file allows it
        [item] = card["items"]
        assert item["tool"] == "tracker_read_resource" and item["capability"] == "mcp:tracker"
        assert ("report", {"service": "api"}) not in ran(log)
        await chat.decide(item["approval_id"], "approve")
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert (await chat.replies())[-1] == "[tracker_read_resource success: report for api: all green]"
        assert ran(log).count(("report", {"service": "api"})) == 1


async def test_content_for_the_person_only_is_told_to_them_not_shown_to_the_model(tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, args=[str(SERVER), "--extras"], tools={"confide": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        assert await ask(gw, chat, "tracker_confide api") == (
            "_tracker: your api password expires tomorrow_\n\n[tracker_confide success: api checked]")
