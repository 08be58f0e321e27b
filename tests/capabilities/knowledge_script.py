"""A scripted offline model for the knowledge capabilities' tests, and a world on any database.

The model reads the latest prompt: `call TOOL {json arguments}` calls that tool once with those
arguments (JSON, so lists and objects can be passed), then answers with what the tool returned.
Anything else is answered with "ok". Every model request is recorded: the instructions and the
parts of the last request (where the plan reminder is appended at the tail).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs import llm

from ..conftest import running_gateway, write_config
from ..fakes.chat import fake_platforms
from .support import SEEN, World, slack_binding, telegram_binding


@dataclass
class Request:
    instructions: str
    tail: list[str]  # the text of every user-prompt part of the last request, in order
    tools: list[str]
    descriptions: dict[str, str]  # each offered tool's description, as the model reads it


@dataclass
class Script:
    requests: list[Request] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # tool results, in order
    retries: list[str] = field(default_factory=list)  # retry prompts (the model's mistakes), in order


SCRIPT = Script()
OPENINGS = itertools.count(1)  # a reopened world numbers its events anew, past the last one's
CALL = re.compile(r"call (\w+)\s*(\{.*\})?\s*$", re.S)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(c for c in content if isinstance(c, str))


async def _scripted(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    assert isinstance(last, ModelRequest)
    SCRIPT.requests.append(Request(info.instructions or "",
                                   [_text(p.content) for p in last.parts if isinstance(p, UserPromptPart)],
                                   sorted(t.name for t in info.function_tools),
                                   {t.name: t.description or "" for t in info.function_tools}))
    returned = [p for p in last.parts if isinstance(p, (ToolReturnPart, RetryPromptPart))]
    if returned:
        for part in returned:
            if isinstance(part, RetryPromptPart):
                SCRIPT.retries.append(part.model_response())
            else:  # pydantic-ai 2.68 sends a retry prompt as a return part with outcome "retried"
                (SCRIPT.retries if part.outcome == "retried" else SCRIPT.results).append(str(part.content))
        yield "answered."
        return
    prompt = next((_text(p.content) for p in reversed(last.parts) if isinstance(p, UserPromptPart)
                   and not _text(p.content).startswith("<")), "")
    # The runner prefixes a group message with its speaker ("alice: ..."): the call follows it.
    found = CALL.search(prompt)
    if found:
        yield {0: DeltaToolCall(name=found.group(1), json_args=found.group(2) or "{}")}
        return
    yield "ok"


llm.register_model("knowledge-scripted", lambda: FunctionModel(stream_function=_scripted, model_name="knowledge-scripted"))


def call(tool: str, **args: Any) -> str:
    return f"call {tool} {json.dumps(args)}"


def scripted_agent(*capabilities: dict[str, Any]) -> dict[str, Any]:
    return {"name": "Agent", "model": "knowledge-scripted", "instructions": "You are a test agent.",
            "capabilities": list(capabilities)}


@contextlib.asynccontextmanager
async def world_on(directory: Path, database: str | None = None, *, agents: dict[str, dict[str, Any]],
                   gateway: dict[str, Any] | None = None,
                   bindings: dict[str, dict[str, Any]] | None = None) -> AsyncIterator[World]:
    """A started gateway on SQLite (the default) or the given database URL; the same files reopen it."""
    settings = dict(gateway or {})
    if database is not None:
        settings["database"] = {"url": database}
    cfg = write_config(directory, agents=agents, gateway=settings,
                       bindings=bindings or {"slack": slack_binding(), "telegram": telegram_binding()})
    with fake_platforms("slack", "telegram", "mattermost"):
        async with running_gateway(cfg) as gw:
            SEEN.clear()
            SCRIPT.requests.clear()
            SCRIPT.results.clear()
            SCRIPT.retries.clear()
            w = World(gw)
            w._ids = itertools.count(next(OPENINGS) * 100_000)
            yield w
