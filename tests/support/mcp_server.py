"""An MCP server for tests, written with the `mcp` package (`MCPServer`, FastMCP's successor in mcp 2).

Over stdio: `python tests/support/mcp_server.py`. Over streamable HTTP: `serve_http()` in the test's
own event loop on 127.0.0.1 with an ephemeral port, or `python tests/support/mcp_server.py --http 0`
(prints the URL). Every tool call is appended to `$MCP_LOG` (one JSON line) so a test can count
how often a tool really ran, whichever process served it.

`--extras` adds the tools that exercise the rest of the protocol (logs, binary results, progress, elicitation:
`release` asks the person a form with a boolean, an enum and a string, `pester` asks two questions at once);
`--noisy` prints a line that is not JSON-RPC on stdout before serving, as servers with a banner do.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gzip
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import Annotations, BlobResourceContents, EmbeddedResource, ResourceLink, TextContent
from pydantic import BaseModel, Field

# A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


def _record(tool: str, **args: Any) -> None:
    path = os.environ.get("MCP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"tool": tool, "args": args, "pid": os.getpid()}) + "\n")


def build(name: str = "test-tracker", *, extras: bool = False) -> MCPServer:
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

    if extras:
        _add_extras(server)
    return server


class Release(BaseModel):
    confirm: bool = Field(title="Really release?")
    env: Literal["staging", "prod"] = Field(title="Environment")
    reason: str = Field(title="Why now?")


class Confirm(BaseModel):
    sure: bool = Field(title="Sure?")


def _ask_release(service: str) -> Elicit[Release]:
    # Markup and a mention a chat would act on: the card must show them as text.
    return Elicit(f"Release {service}? <!channel> *now* <b>bold</b> @everyone", Release)


def _ask_first(service: str) -> Elicit[Confirm]:
    return Elicit(f"First question about {service}", Confirm)


def _ask_second(service: str) -> Elicit[Confirm]:
    return Elicit(f"Second question about {service}", Confirm)


def _outcome(answer: Any) -> str:
    if isinstance(answer, AcceptedElicitation):
        return f"accepted {answer.data.model_dump()}"
    return answer.action


def _add_extras(server: MCPServer) -> None:
    @server.tool()
    def release(service: str, answer: Annotated[ElicitationResult[Release], Resolve(_ask_release)]) -> str:
        """Releases a service after asking the person (elicitation)."""
        _record("release", service=service, answer=_outcome(answer))
        return f"release {service}: {_outcome(answer)}"

    @server.tool()
    def pester(service: str, first: Annotated[ElicitationResult[Confirm], Resolve(_ask_first)],
               second: Annotated[ElicitationResult[Confirm], Resolve(_ask_second)]) -> str:
        """Asks the person two questions at once."""
        _record("pester", service=service)
        return f"pester {service}: {sorted([_outcome(first), _outcome(second)])}"

    @server.tool()
    async def chatter(service: str, ctx: Context) -> str:
        """Logs at the loudest level, and floods its stderr."""
        _record("chatter", service=service)
        await ctx.log("critical", f"{service} is melting", logger_name="tracker.core")
        for n in range(100):
            print(f"{service} stderr line {n}", file=sys.stderr, flush=True)
        return "chattered"

    @server.tool()
    async def slow(service: str, ctx: Context) -> str:
        """Works in five steps, reporting its progress after each."""
        _record("slow", service=service)
        for step in range(1, 6):
            await ctx.report_progress(step * 20, 100, "crunching" if step < 5 else None)
            await asyncio.sleep(0.05)
        return f"{service} done"

    @server.resource("tracker://reports/{service}", mime_type="text/plain")
    def report(service: str) -> str:
        """A service's report."""
        _record("report", service=service)
        return f"report for {service}: all green"

    @server.tool()
    def linked(service: str) -> ResourceLink:
        """A link to a service's report (read it with read_resource)."""
        _record("linked", service=service)
        return ResourceLink(type="resource_link", name=f"{service} report", uri=f"tracker://reports/{service}",
                            mimeType="text/plain")

    @server.tool()
    def confide(service: str) -> list[TextContent]:
        """Answers the model, and has a word for the person only (audience: user)."""
        _record("confide", service=service)
        return [TextContent(type="text", text=f"{service} checked"),
                TextContent(type="text", text=f"your {service} password expires tomorrow",
                            annotations=Annotations(audience=["user"]))]

    @server.tool()
    def environment(service: str) -> str:
        """The names of the variables in the server's environment."""
        _record("environment", service=service)
        return " ".join(sorted(os.environ))

    @server.tool()
    def archive(service: str) -> EmbeddedResource:
        """A gzip archive of a service's logs (a binary that is neither an image nor a PDF)."""
        _record("archive", service=service)
        blob = base64.b64encode(gzip.compress(b"log line\n" * 10)).decode()
        return EmbeddedResource(type="resource", resource=BlobResourceContents(
            uri=f"file:///logs/{service}.gz", mimeType="application/gzip", blob=blob))


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
    parser.add_argument("--extras", action="store_true", help="add the tools that exercise the rest of the protocol")
    parser.add_argument("--noisy", action="store_true", help="print a line that is not JSON-RPC before serving")
    args = parser.parse_args(argv)
    if args.noisy:
        print("tracker v1.0 starting, hello from stdout", flush=True)
    if args.http is None:
        build(args.name, extras=args.extras).run("stdio")
        return

    async def serve() -> None:
        async with serve_http(args.http) as url:
            print(url, flush=True)
            await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    sys.exit(main())
