"""One run's tool call as the pool's MCP client sees it (`CURRENT_CALL`, set by the run for the call).

The FastMCP client is shared by every run of the agent; the call's own context says where what is
not for the model goes: its progress notifications become the thread's status line (`ProgressLine`),
and content the server marked for the person only (`audience: ["user"]`) is told to the person in
the reply instead of being shown to the model. The result is also made to keep what a resource is:
a resource link reaches the model with its name and MIME type (and the hint to read it), an embedded
text resource with its URI and type.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from gateway.mcp.progress import ProgressLine


@dataclass
class RunCall:
    server: str
    status: Callable[[str], Awaitable[None]]
    tell: Callable[[str], Awaitable[None]]
    usage: Any = None  # the run's RunUsage: a sampling request served for this call is counted there
    ask: Any = None  # the run's way to put a question to its person (`Turn.ask`), None where it has none
    progress: ProgressLine = field(init=False)

    def __post_init__(self) -> None:
        self.progress = ProgressLine(self.server, self.status)


CURRENT_CALL: ContextVar[RunCall | None] = ContextVar("mcp_current_call", default=None)
TOLD_CHARS = 2000  # of one person-only block, as told in the reply


async def reshaped(result: Any, call: RunCall | None) -> Any:
    """The raw `tools/call` result with person-only content told to the person and resources described."""
    from mcp_types import EmbeddedResource, ResourceLink, TextContent, TextResourceContents

    kept = []
    for block in result.content:
        audience = getattr(getattr(block, "annotations", None), "audience", None)
        if audience and "assistant" not in audience:  # for the person only
            if call is not None:
                await call.tell(_for_the_person(call.server, block))
            continue
        if isinstance(block, ResourceLink):
            what = f"{block.name} ({block.mime_type})" if block.mime_type else block.name
            block = TextContent(type="text", text=f"[resource link: {what}: {block.uri}; read it with read_resource]")
        elif isinstance(block, EmbeddedResource) and isinstance(block.resource, TextResourceContents):
            kind = f' type="{block.resource.mime_type}"' if block.resource.mime_type else ""
            block = TextContent(type="text", text=f'<resource uri="{block.resource.uri}"{kind}>\n'
                                                  f"{block.resource.text}\n</resource>")
        kept.append(block)
    return result.model_copy(update={"content": kept})


def _for_the_person(server: str, block: Any) -> str:
    text = getattr(block, "text", None)
    if isinstance(text, str):
        return f"{server}: {text[:TOLD_CHARS]}" + ("…" if len(text) > TOLD_CHARS else "")
    return f"{server} sent something for you that cannot be shown here ({getattr(block, 'type', 'content')})."
