"""A handshake-era MCP server (tests/support/legacy_mcp_server.py, protocol 2025-11-25): kept alive with
`ping`, its task-only tool not offered, elicitation refused, and its sampling requests refused unless the agent file says `sampling: allow`, then answered
with the agent's own model (docs/security.md, MCP servers)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from .conftest import run_finished, running_gateway, wait_for
from .support import plugin_mcp  # noqa: F401  (registers the test:mcp model)
from .test_approvals import Chat
from .test_mcp import ask, config

LEGACY = Path(__file__).resolve().parent / "support" / "legacy_mcp_server.py"
QUESTION = 'legacy_ask_model {"question": "what is 2+2?"}'


def legacy(log: Path, **extra: Any) -> dict[str, Any]:
    return {"name": "legacy", "command": sys.executable, "args": [str(LEGACY)], "env": {"MCP_LOG": str(log)},
            "tools": {"ask_model": "allow", "ask_person": "allow"}, **extra}


async def test_sampling_is_refused_by_default_and_a_quiet_handshake_server_is_pinged(tmp_path: Path) -> None:
    log = tmp_path / "mcp.log"
    cfg = config(tmp_path / "c", [legacy(log)])
    gateway_yaml = cfg / "gateway.yaml"
    gateway_yaml.write_text(gateway_yaml.read_text() + "mcp:\n  keepalive_seconds: 0.1\n")
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        # A tool the server runs only as a task is not offered: this revision's client cannot drive one.
        assert await ask(gw, chat, "tools") == "tools: legacy_ask_model, legacy_ask_person, legacy_nag"
        assert await ask(gw, chat, QUESTION) == "[legacy_ask_model success: sampling refused: Sampling not supported]"
        # Elicitation is not offered either: a server that asks the person anyway is told no, and the run goes on.
        assert await ask(gw, chat, 'legacy_ask_person {"question": "your password?"}') == (
            "[legacy_ask_person success: elicitation refused: Elicitation not supported]")
        server = gw.mcp.existing("ops", "legacy")
        assert server.toolset.client.session.protocol_version == "2025-11-25"
        await wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 5, what="five pings answered")
        assert (server.state, server.connects) == ("up", 1)
    pids = {json.loads(line)["ping"] for line in log.read_text().splitlines()}
    assert len(pids) == 1  # one process all along


async def test_sampling_allowed_is_answered_with_the_agents_own_model(tmp_path: Path) -> None:
    cfg = config(tmp_path / "c", [legacy(tmp_path / "mcp.log", sampling="allow")])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        sent = await chat.say(QUESTION)
        await wait_for(lambda: run_finished(gw, sent["run_id"]))
        assert (await chat.replies())[-1] == "[legacy_ask_model success: the model said: echo: what is 2+2?]"
        # The run's own two model requests (the call, the answer) and the one the server's request cost.
        assert (await gw.store.run(sent["run_id"])).requests == 3
