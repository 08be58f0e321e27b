"""A plugin module (gateway.yaml `plugins:`) for MCP tests: the scripted model `test:mcp`.

- "tools" answers with the names of the tools the run offers, sorted.
- "<tool> <service>" calls that tool with {"service": <service>} ("<tool> {json}" with those arguments), then
  reports what came back
  ("call! <tool> <service>" calls it even when the run does not offer it):
  "[<tool> <outcome>: <content>]", an image as "<image image/png, N bytes>".
- anything else is echoed (also when not streamed: an MCP server's sampling request).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from pydantic_ai.messages import (BinaryContent, ModelMessage, ModelRequest, ModelResponse, TextPart, ToolReturnPart,
                                  UserPromptPart)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs.llm import register_model


def _show(content: object) -> str:
    if isinstance(content, BinaryContent):
        return f"<image {content.media_type}, {len(content.data)} bytes>"
    if isinstance(content, list):
        return " + ".join(_show(c) for c in content)
    return str(content)


async def _script(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        for p in returns:
            yield f"[{p.tool_name} {p.outcome}: {_show(p.content)}]"
        return
    prompt = str(next(p.content for p in reversed(last.parts) if isinstance(p, UserPromptPart)))
    names = sorted(t.name for t in info.function_tools)
    speaker, _, said = prompt.partition(": ")  # a shared channel's message comes as "<name>: <text>"
    if said and " " not in speaker:
        prompt = said
    words = prompt.split()
    if words == ["tools"]:
        yield "tools: " + ", ".join(names)
        return
    forced = len(words) >= 3 and words[0] == "call!"  # call a tool even if the run does not offer it
    if forced or (words and words[0] in names):
        name = words[1] if forced else words[0]
        rest = prompt.split(maxsplit=2 if forced else 1)[-1]
        args = rest if rest.startswith("{") else json.dumps({"service": words[-1]})
        yield {0: DeltaToolCall(name=name, json_args=args, tool_call_id="call-0")}
        return
    yield f"echo: {prompt}"


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Not streamed (an MCP server's sampling request): the prompt, echoed."""
    prompt = " ".join(str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
                      if isinstance(p, UserPromptPart))
    return ModelResponse(parts=[TextPart(f"echo: {prompt}")])


register_model("test:mcp", lambda: FunctionModel(_answer, stream_function=_script))
