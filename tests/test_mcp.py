"""MCP servers as an agent's tools, end to end: a real MCP server (tests/support/mcp_server.py, written
with the `mcp` package) over stdio and over streamable HTTP, a real gateway, the web API."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from .conftest import running_gateway, wait_for, write_config
from .support import plugin_mcp  # noqa: F401  (registers the test:mcp model)
from .support.mcp_server import serve_http
from .test_approvals import Chat

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


async def finished(gw: Any, run_id: str) -> bool:
    run = await gw.store.run(run_id)
    return run is not None and run.status == "finished"


async def ask(gw: Any, chat: Chat, text: str) -> str:
    """Send `text`, wait for the run to finish, return its reply."""
    sent = await chat.say(text)
    await wait_for(lambda: finished(gw, sent["run_id"]), what=f"the run for {text!r}")
    return (await chat.replies())[-1]


async def test_stdio_tools_are_prefixed_and_deny_is_never_offered(tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [stdio(log, tools={"status": "allow", "drop_database": "deny"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        assert await ask(gw, chat, "tools") == ("tools: tracker_chart, tracker_deploy, tracker_explode, tracker_grow, "
                                                "tracker_status, tracker_whoami")
        assert await ask(gw, chat, "tracker_status api") == "[tracker_status success: api is green]"
        assert await ask(gw, chat, "tracker_drop_database api") == "echo: tracker_drop_database api"
        assert ran(log) == [("status", {"service": "api"})]
