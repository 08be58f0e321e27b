"""A plugin module (gateway.yaml `plugins:`) for tests: a gated ops capability and scripted models.

Loaded by daemons in other processes too, so a multi-replica test can park a run on one and
decide it on another.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.toolsets import FunctionToolset

from capabilities.registry import REGISTRY, BuildContext, CapabilityDecl, ToolDecl, register, simple
from gateway.runs.llm import register_model

# Tool calls are appended here (and to $OPS_LOG when set, for daemons in other processes).
RAN: list[tuple[str, str]] = []


def _record(tool: str, service: str) -> None:
    RAN.append((tool, service))
    path = os.environ.get("OPS_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps([tool, service, os.getpid()]) + "\n")


def _ops(ctx: BuildContext) -> Any:
    toolset: FunctionToolset[Any] = FunctionToolset()

    @toolset.tool_plain
    def deploy(service: str) -> str:
        """Deploy a service.

        Returns:
            What was deployed.
        """
        _record("deploy", service)
        return f"deployed {service}"

    @toolset.tool_plain
    def status(service: str) -> str:
        """Show a service's status.

        Returns:
            The status line.
        """
        _record("status", service)
        return f"{service} is green"

    return simple(toolsets=[toolset])


if "test_ops" not in REGISTRY:
    register(CapabilityDecl(id="test_ops", name="Test ops", category="test",
                            tools=(ToolDecl("deploy", side_effecting=True), ToolDecl("status")), build=_ops))


async def _script(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """Calls the tools named in the prompt ("deploy api", "deploy+status api"), then reports the results;
    "deploy {JSON}" calls it with those arguments; "count N" streams "1 2 … N" one number at a time (after "1", waiting for the file $OPS_GATE if set);
    the report of the results waits for the file $OPS_RESUME_GATE, if set, before it ends."""
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        for p in returns:
            yield f"[{p.tool_name}: {p.content}] "
        gate = os.environ.get("OPS_RESUME_GATE")
        while gate and not os.path.exists(gate):  # the test looks at the page while this reply is still going
            await asyncio.sleep(0.05)
        return
    prompt = next(p.content for p in reversed(last.parts) if isinstance(p, UserPromptPart))
    words = str(prompt).split()
    names = {t.name for t in info.function_tools}
    if len(words) == 2 and words[0] == "count" and words[1].isdigit():  # a reply streamed in many deltas
        _record("count", words[1])
        gate = os.environ.get("OPS_GATE")
        for i in range(1, int(words[1]) + 1):
            await asyncio.sleep(0.05)
            yield f"{i} "
            while i == 1 and gate and not os.path.exists(gate):  # the test lets the rest come when it has seen "1"
                await asyncio.sleep(0.05)
        return
    calls = [w for w in words[0].split("+") if w in names] if words else []
    if not calls:
        await asyncio.sleep(float(os.environ.get("OPS_ANSWER_DELAY", "0")))
        yield f"echo: {prompt}"
        return
    yield "Let me do that. "
    # "deploy {JSON}": the call's arguments exactly as written (a value may hold spaces).
    written = str(prompt).partition(" ")[2].strip()
    args = written if written.startswith("{") else json.dumps({"service": words[-1]})
    yield {i: DeltaToolCall(name=name, json_args=args, tool_call_id=f"call-{i}") for i, name in enumerate(calls)}


register_model("test:ops", lambda: FunctionModel(stream_function=_script))
