"""A run that says something, then waits in a tool call until the test lets it go: the shape of a
long tool call after the first draft. The model streams "Looking it up." and calls `slow_lookup`,
which holds until `release` is set; it then ends with "Found: <what the tool said>"."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from capabilities.registry import REGISTRY, CapabilityDecl, ToolDecl, register, simple
from gateway.runs.llm import REGISTERED, register_model

MODEL = "slow-tool-scripted"
CAPABILITY = "slow_tool_test"
FIRST = "Looking it up."
FINAL = "Looking it up.\n\nFound: sunny"


class SlowTool:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def slow_lookup(self, topic: str) -> str:
        """Look something up (in this test: waits until the test lets it answer)."""
        self.started.set()
        await self.release.wait()
        return "sunny"


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        yield f"Found: {returns[0].content}"
        return
    yield FIRST
    yield {0: DeltaToolCall(name="slow_lookup", json_args=json.dumps({"topic": "weather"}), tool_call_id="slow-1")}


@contextmanager
def slow_tool() -> Iterator[SlowTool]:
    tool = SlowTool()
    register_model(MODEL, lambda: FunctionModel(stream_function=_stream, model_name=MODEL))
    register(CapabilityDecl(id=CAPABILITY, name="Slow lookup (test)", category="test",
                            tools=(ToolDecl("slow_lookup"),), build=lambda ctx: simple(tools=[tool.slow_lookup])))
    try:
        yield tool
    finally:
        REGISTRY.pop(CAPABILITY, None)
        REGISTERED.pop(MODEL, None)


AGENT = {"name": "Slow agent", "model": MODEL, "capabilities": [{"id": CAPABILITY}]}
