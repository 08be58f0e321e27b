"""pydantic-ai's `MCPToolset`, as the pool uses it. Imported only when a server is connected
(`pydantic_ai.mcp` pulls in FastMCP, which takes seconds to import).

- The tool list is the pool's: it is listed when the connection comes up and again when the server
  announces a change, never once per run.
- A tool's error reaches the model as that tool's failed result, in the server's own words
  (`tool_error_behavior='failed'`); a protocol failure stays a retry prompt.
- Results are mapped by pydantic-ai: text (JSON text parsed) to the model; images and other media as
  files, sent as the model's input where its provider accepts them and otherwise replaced by a note
  naming them.
- The server's own instructions are not added to the agent's: they are text from outside.
- A stdio program gets only the environment configured for it (plus PATH, HOME, USER, LOGNAME,
  SHELL, TERM) and is stopped when its connection closes. Its stderr goes into a pipe the pool reads
  (`gateway/mcp/server_log.py`), so each line is logged under the server's name.
"""

from __future__ import annotations

import logging
from typing import Any, TextIO

from fastmcp import Client
from fastmcp.client.transports import StdioTransport, StreamableHttpTransport
from pydantic_ai.mcp import MCPToolset

from bindings.models import McpServerSpec
from gateway.mcp.call import CURRENT_CALL, reshaped

# FastMCP gives its logger a console handler of its own at import; its lines go through ours instead.
_fastmcp_log = logging.getLogger("fastmcp")
_fastmcp_log.handlers.clear()
_fastmcp_log.propagate = True


def _not_the_parse_failure(record: logging.LogRecord) -> bool:
    """The SDK logs every non-JSON stdout line as an error with a traceback and no server name; the same line
    reaches the pool's message handler, which logs it under the server's name (`ServerLog.not_json`)."""
    return record.getMessage() != "Failed to parse JSONRPC message from server"


logging.getLogger("mcp.client.stdio").addFilter(_not_the_parse_failure)


class PooledToolset(MCPToolset[Any]):
    """An `MCPToolset` whose tool list is the one the pool keeps (`pooled_tools`)."""

    pooled_tools: list[Any] = []

    async def list_tools(self) -> list[Any]:
        return self.pooled_tools


class _Client(Client[Any]):
    """FastMCP's client, shared by the agent's runs; each tool call's progress and person-only content go
    where the run's call says (`CURRENT_CALL`), and resources keep their name and type for the model."""

    async def call_tool_mcp(self, name: str, arguments: dict[str, Any], progress_handler: Any = None,
                            timeout: Any = None, meta: dict[str, Any] | None = None) -> Any:
        call = CURRENT_CALL.get()
        handler = progress_handler or (call.progress if call is not None else None)
        return await reshaped(await super().call_tool_mcp(name, arguments, handler, timeout, meta), call)


async def _no_progress(progress: float, total: float | None, message: str | None) -> None:
    """Progress of a request no run asked about (the pool's own): nobody to show it to."""


def pooled_toolset(
    spec: McpServerSpec,
    *,
    message_handler: Any,
    log_handler: Any,
    connect_timeout: float,
    url: str | None = None,
    headers: dict[str, str] | None = None,
    command: str | None = None,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    stderr: TextIO | None = None,
    elicitation_handler: Any = None,
) -> PooledToolset:
    transport: Any
    if url is not None:
        transport = StreamableHttpTransport(url, headers=headers or None)
    else:
        assert command is not None and stderr is not None
        transport = StdioTransport(command, args or [], env=env or None, keep_alive=False, log_file=stderr)
    # No roots handler, and elicitation only under `elicitation: ask` (sampling is the pool's to set): what the
    # client does not offer, a server cannot ask for.
    client = _Client(transport, message_handler=message_handler, log_handler=log_handler,
                     progress_handler=_no_progress, timeout=spec.timeout_seconds, init_timeout=connect_timeout,
                     elicitation_handler=elicitation_handler)
    return PooledToolset(client, id=spec.name, tool_error_behavior="failed", cache_tools=False,
                         include_instructions=False)
