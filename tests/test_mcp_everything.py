"""docs/mcp.md's claims, against `@modelcontextprotocol/server-everything` (npm), the reference server
that exercises every MCP feature (protocol 2025-11-25), over stdio: its tools listed and called, an image
result reaching the model, a resource link read back with `read_resource`, progress notifications as
the page's status line, a structured result, and sampling refused by default (answered when allowed).

The Makefile's `test` target installs the pinned version under `.cache/mcp-everything` (gitignored)
when it is missing; without it this test fails and says how to install it, it never skips.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp

from .conftest import running_gateway, wait_for
from .support import plugin_mcp  # noqa: F401  (registers the test:mcp model)
from .test_approvals import Chat
from .test_mcp import ask, config
from .test_web_api import _sse

VERSION = "2026.8.31"  # the newest on npm (Dec 2026); it declares no `engines` and runs on node 20
PREFIX = Path(__file__).resolve().parent.parent / ".cache" / "mcp-everything"
SERVER = PREFIX / "node_modules" / ".bin" / "mcp-server-everything"
INSTALL = f"npm install --prefix {PREFIX} @modelcontextprotocol/server-everything@{VERSION}"
ALLOWED = ["echo", "get-tiny-image", "get-resource-links", "read_resource", "trigger-long-running-operation",
           "get-structured-content"]


def everything(**extra: Any) -> dict[str, Any]:
    """The server's entry; a clear failure when the pinned version is not installed."""
    assert SERVER.exists(), f"{SERVER} is missing: `make test` installs it, or run `{INSTALL}`"
    installed = json.loads((PREFIX / "node_modules" / "@modelcontextprotocol" / "server-everything" /
                            "package.json").read_text())["version"]
    assert installed == VERSION, f"server-everything {installed} is installed, the test pins {VERSION}: {INSTALL}"
    return {"name": "everything", "command": str(SERVER), "args": ["stdio"], **extra}


async def test_the_reference_server_through_a_run(tmp_path: Path) -> None:
    cfg = config(tmp_path / "c", [everything(tools={t: "allow" for t in ALLOWED})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        offered = (await ask(gw, chat, "tools")).removeprefix("tools: ").split(", ")
        assert {f"everything_{t}" for t in ALLOWED + ["get-sum", "get-env"]} <= set(offered)
        # What needs what we do not offer is not offered: sampling and elicitation (no client capability,
        # so the server does not register the tools that would ask), a task-only tool (handshake revision).
        assert not [t for t in offered if "sampling" in t or "elicitation" in t or "research" in t], offered
        assert gw.mcp.existing("ops", "everything").toolset.client.session.protocol_version == "2025-11-25"

        assert await ask(gw, chat, 'everything_echo {"message": "hi"}') == "[everything_echo success: Echo: hi]"
        assert await ask(gw, chat, "everything_get-tiny-image {}") == (  # the image is the model's input
            "[everything_get-tiny-image success: Here's the image you requested: + <image image/png, 4033 bytes> + "
            "The image above is the MCP logo.]")
        assert await ask(gw, chat, 'everything_get-structured-content {"location": "Chicago"}') == (
            "[everything_get-structured-content success: {'temperature': 36, 'conditions': 'Light rain / drizzle', "
            "'humidity': 82}]")

        links = await ask(gw, chat, 'everything_get-resource-links {"count": 2}')
        assert ("[resource link: Text Resource 2 (text/plain): demo://resource/dynamic/text/2; read it with "
                "read_resource]") in links
        read = await ask(gw, chat, 'everything_read_resource {"uri": "demo://resource/dynamic/text/2"}')
        assert read.startswith("[everything_read_resource success: ") and "Resource 2" in read, read

        events: list[dict[str, Any]] = []
        listener = asyncio.create_task(_sse(s, f"/api/v1/conversations/{chat.conv}/events", events))
        await wait_for(lambda: gw.events._listeners.get(chat.conv), what="SSE subscription")
        assert await ask(gw, chat, 'everything_trigger-long-running-operation {"duration": 1, "steps": 4}') == (
            "[everything_trigger-long-running-operation success: Long running operation completed. Duration: 1 "
            "seconds, Steps: 4.]")
        await wait_for(lambda: any(e["type"] == "run_end" for e in events), what="run end")
        listener.cancel()
    assert [e["text"] for e in events if e["type"] == "status"] == [
        "using everything_trigger-long-running-operation…", "everything: 25 %", "everything: 50 %",
        "everything: 75 %", "everything: 100 %"]


async def test_sampling_is_offered_to_the_server_only_where_allowed(tmp_path: Path) -> None:
    """By default the client declares no sampling, so the server's sampling tool is not even there (first
    test); with `sampling: allow` it is, and its request is answered with the agent's own model."""
    cfg = config(tmp_path / "c", [everything(sampling="allow", tools={"trigger-sampling-request": "allow"})])
    async with running_gateway(cfg) as gw, aiohttp.ClientSession(gw.url) as s:
        chat = await Chat(s).open()
        reply = await ask(gw, chat, 'everything_trigger-sampling-request {"prompt": "2+2?"}')
    assert reply.startswith("[everything_trigger-sampling-request success: LLM sampling result:")
    assert '"text": "echo: Resource trigger-sampling-request context: 2+2?"' in reply, reply
