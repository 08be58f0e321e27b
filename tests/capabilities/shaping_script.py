"""A scripted offline model for run-shaping tests, and a small MCP server's config.

`SCRIPT.steps` is what the model does at each request, in order: a step is a function of the
request's messages that returns text or a `Call`. Every request is recorded (messages, tool
definitions, instructions), so a test can assert what the model was sent. With no step left
the model answers "done".
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from gateway.runs import llm

MCP_SERVER = Path(__file__).resolve().parent / "shaping_mcp_server.py"


@dataclass(frozen=True)
class Call:
    tool: str
    args: dict[str, Any] = field(default_factory=dict)


Step = Callable[[list[ModelMessage]], "str | Call"]


@dataclass
class Request:
    messages: list[ModelMessage]
    tools: dict[str, ToolDefinition]
    instructions: str
    parameters: ModelRequestParameters | None = None  # all the request carried beside its messages

    def tool_results(self) -> list[str]:
        last = self.messages[-1]
        if not isinstance(last, ModelRequest):
            return []
        return [str(p.content) for p in last.parts if isinstance(p, ToolReturnPart)]

    def user_texts(self) -> list[str]:
        return [p.content for m in self.messages if isinstance(m, ModelRequest) for p in m.parts
                if isinstance(p, UserPromptPart) and isinstance(p.content, str)]

    @property
    def size(self) -> int:
        """Characters sent: instructions, tool schemas, every message part."""
        parts = sum(len(str(getattr(p, "content", "")) or "") + len(json.dumps(getattr(p, "args", None) or {}))
                    for m in self.messages for p in m.parts)
        schemas = sum(len(json.dumps(t.parameters_json_schema)) + len(t.description or "") for t in self.tools.values())
        return parts + schemas + len(self.instructions)


@dataclass
class Script:
    steps: list[Step] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    summaries: int = 0

    def reset(self, *steps: Step) -> None:
        self.steps[:] = list(steps)
        self.requests.clear()
        self.summaries = 0

    @property
    def answered(self) -> list[Request]:
        """The requests of the runs themselves (not a summariser's)."""
        return [r for r in self.requests if not r.instructions.startswith(SUMMARIZER)]


SCRIPT = Script()


def say(text: str) -> Step:
    return lambda messages: text


def call(tool: str, **args: Any) -> Step:
    return lambda messages: Call(tool, args)


SUMMARIZER = "You are a context summarization assistant."  # the harness's summarising agent


def _next(messages: list[ModelMessage], info: AgentInfo) -> str | Call:
    request = Request(list(messages), {t.name: t for t in info.function_tools}, info.instructions or "",
                      info.model_request_parameters)
    SCRIPT.requests.append(request)
    if request.instructions.startswith(SUMMARIZER):  # a summary request answers itself, taking no step
        SCRIPT.summaries += 1
        return f"SUMMARY {SCRIPT.summaries}: the earlier conversation, in short."
    step = SCRIPT.steps.pop(0) if SCRIPT.steps else say("done")
    return step(messages)


def _complete(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The same script, non-streamed (what an agent a capability builds itself asks for)."""
    reply = _next(messages, info)
    if isinstance(reply, Call):
        return ModelResponse(parts=[ToolCallPart(reply.tool, json.dumps(reply.args))])
    return ModelResponse(parts=[TextPart(reply)])


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    reply = _next(messages, info)
    if isinstance(reply, Call):
        yield {0: DeltaToolCall(name=reply.tool, json_args=json.dumps(reply.args))}
    else:
        yield reply


class ScriptedModel(FunctionModel):
    """A FunctionModel whose streamed responses report what was sent as their input tokens (about 4
    characters a token, instructions and tool schemas included), as a provider would."""

    @contextlib.asynccontextmanager
    async def request_stream(self, messages: list[ModelMessage], model_settings: Any, model_request_parameters: Any,
                             run_context: Any = None) -> AsyncIterator[Any]:
        async with super().request_stream(messages, model_settings, model_request_parameters, run_context) as stream:
            stream._usage = RequestUsage(input_tokens=SCRIPT.requests[-1].size // 4)
            yield stream


llm.register_model("shaping-scripted", lambda: ScriptedModel(_complete, stream_function=_stream, model_name="shaping-scripted"))


def mcp_server(name: str, **extra: Any) -> dict[str, Any]:
    """An `mcp_servers:` entry running `shaping_mcp_server.py` over stdio."""
    return {"name": name, "command": sys.executable, "args": [str(MCP_SERVER)], **extra}


def last_response_text(messages: list[ModelMessage]) -> str:
    for m in reversed(messages):
        if isinstance(m, ModelResponse):
            return m.text or ""
    return ""


def chat_text(w: Any, binding: str = "slack") -> str:
    """Everything the gateway posted in the fake chat, in order (edits included, as they stand)."""
    return "\n".join(text for _, text in w.adapter(binding).posts.values())
