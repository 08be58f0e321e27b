"""An MCP server for tests, written with the `mcp` package (`MCPServer`, FastMCP's successor in mcp 2).

Over stdio: `python tests/support/mcp_server.py`. Over streamable HTTP: `serve_http()` in the test's
own event loop on 127.0.0.1 with an ephemeral port, or `python tests/support/mcp_server.py --http 0`
(prints the URL). Every tool call is appended to `$MCP_LOG` (one JSON line) so a test can count
how often a tool really ran, whichever process served it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def _record(tool: str, **args: Any) -> None:
    path = os.environ.get("MCP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n")


def build(name: str = "test-tracker") -> MCPServer:
    server = MCPServer(name, instructions="A tracker for tests.", log_level="WARNING")

    @server.tool()
    def status(service: str) -> str:
        """A service's status."""
        _record("status", service=service)
        return f"{service} is green"

    @server.tool()
    def deploy(service: str) -> str:
        """Deploy a service."""
        _record("deploy", service=service)
        return f"deployed {service}"

    @server.tool()
    def drop_database(service: str) -> str:
        """Delete a service's database."""
        _record("drop_database", service=service)
        return f"dropped {service}"

    @server.tool()
    def explode(service: str) -> str:
        """Always fails."""
        _record("explode", service=service)
        raise ToolError(f"the {service} tracker is on fire")

    @server.tool()
    def chart(service: str) -> Image:
        """A chart of a service's load."""
        _record("chart", service=service)
        return Image(data=PNG, format="png")

    @server.tool()
    def whoami(service: str) -> str:
        """The server's process id."""
        _record("whoami", service=service)
        return f"pid {os.getpid()}"

    @server.tool()
    async def grow(service: str, ctx: Context) -> str:
        """Adds a tool named `<service>_report` and announces that the tool list changed."""
        _record("grow", service=service)

        def report() -> str:
            return f"report for {service}"

        server.add_tool(report, name=f"{service}_report", description="A report added at run time.")
        await ctx.notify_tools_changed()
        try:  # sessions of the handshake era hear it as a notification
            await ctx.session.send_tool_list_changed()
        except Exception:
            pass
        return f"added {service}_report"

    return server


@contextlib.asynccontextmanager
async def serve_http(port: int = 0, *, token: str | None = None) -> AsyncIterator[str]:
    """Serve `build()` over streamable HTTP on 127.0.0.1 in this event loop; yields the endpoint URL.

    With `token`, a request without `Authorization: Bearer <token>` is refused with 401.
    """
    import uvicorn

    app: Any = build().streamable_http_app()
    if token is not None:
        app = _require_bearer(app, token)
    # Quiet: stopping the server under an open change stream is routine here, not worth a traceback.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="critical", lifespan="on",
                            timeout_graceful_shutdown=0.2)
    web = uvicorn.Server(config)
    task = asyncio.create_task(web.serve())
    try:
        while not web.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{web.servers[0].sockets[0].getsockname()[1]}/mcp"
    finally:
        web.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _require_bearer(app: Any, token: str) -> Any:
    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != f"Bearer {token}".encode():
            await send({"type": "http.response.start", "status": 401, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port (0: any)")
    parser.add_argument("--name", default="test-tracker")
    args = parser.parse_args(argv)
    if args.http is None:
        build(args.name).run("stdio")
        return

    async def serve() -> None:
        async with serve_http(args.http) as url:
            print(url, flush=True)
            await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
