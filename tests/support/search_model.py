"""A scripted model for conversation search through a real platform: "find X" searches, "open ID"
opens, anything else is noted; a tool's answer comes back as the reply, so the test reads it on
the platform the way the person would."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs.llm import register_model

MODEL = "conversation-search-scripted"


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                yield f"The tool said: {part.content}"
                return
            if isinstance(part, RetryPromptPart):
                yield f"The tool said: {part.model_response()}"
                return
    prompts = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
               if isinstance(p, UserPromptPart) and isinstance(p.content, str)]
    said = prompts[-1] if prompts else ""
    call: tuple[str, dict[str, Any]] | None = None
    if found := re.search(r"\bfind (\w+)", said):
        call = ("search_conversations", {"query": found.group(1)})
    elif opened := re.search(r"\bopen (\w+)", said):
        call = ("read_conversation", {"conversation_id": opened.group(1)})
    if call is not None:
        yield {0: DeltaToolCall(name=call[0], json_args=json.dumps(call[1]))}
        return
    yield "noted"


def register() -> str:
    register_model(MODEL, lambda: FunctionModel(stream_function=_stream, model_name=MODEL))
    return MODEL


def conversation_id(reply: str) -> str:
    """The first conversation id a search's answer names."""
    found = re.search(r"id (\w+) —", reply)
    assert found, reply
    return found.group(1)
