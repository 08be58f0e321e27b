"""A scripted offline model: the message says which tool calls to make, in order, with what arguments.

`say_calls(("run_python", {"code": "1 + 1"}))` is a message the model answers by making those
calls one after another (one per model request), then replying with the last tool's answer.
An argument "$TASK" stands for the last background run id the run has seen (a run id is not known
when a script is written).
A message that is not a script is answered like the recorder answers it. What each run showed
the model is recorded in `support.SEEN`, like the recorder's runs; instructions the framework
delivers in a request (a skill's body once loaded) are recorded with the instructions.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pydantic_ai.messages import ModelMessage, ModelRequest, RetryPromptPart, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs import llm

from ..conftest import pg_database
from . import support

PREFIX = "CALLS "


def say_calls(*calls: tuple[str, dict[str, Any]]) -> str:
    return PREFIX + json.dumps([[name, args] for name, args in calls])


def _framework(part: UserPromptPart) -> bool:
    """Instructions the framework delivers in the prompt (a loaded capability's), not a person's words."""
    return isinstance(part.content, str) and part.content.startswith("<system>")


def _since_prompt(messages: list[ModelMessage]) -> tuple[str, int]:
    """The latest user prompt and how many tool calls the model made after it."""
    made = 0
    for message in reversed(messages):
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart) and isinstance(part.content, str) and not _framework(part):
                return part.content, made
            if isinstance(part, ToolCallPart):
                made += 1
    return "", made


async def _scripted(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    seen = support.SEEN[-1] if support.SEEN else support.Seen()
    seen.instructions.append(info.instructions or "")
    seen.tools = sorted(t.name for t in info.function_tools)
    seen.defs = {t.name: t for t in info.function_tools}
    last = messages[-1]
    answered = ""
    if isinstance(last, ModelRequest):
        for part in last.parts:
            if isinstance(part, ToolReturnPart):
                into = seen.retries if part.outcome == "retried" else seen.tool_results
                into.append(str(part.content))
                answered = str(part.content)
            elif isinstance(part, RetryPromptPart):
                seen.retries.append(part.model_response())
                answered = part.model_response()
            elif isinstance(part, UserPromptPart) and _framework(part):
                seen.instructions.append(str(part.content))  # e.g. a skill's body, once loaded
    prompt, made = _since_prompt(messages)
    if PREFIX in prompt:  # in a group the prompt starts with the speaker's name
        # The script may be followed by other text (a handoff's envelope closes after it).
        calls, _ = json.JSONDecoder().raw_decode(prompt[prompt.index(PREFIX) + len(PREFIX):])
        if made < len(calls):
            name, args = calls[made]
            encoded = json.dumps(args)
            if '"$TASK"' in encoded:
                ids = re.findall(r"\b[0-9a-f]{24}\b", json.dumps([m.parts for m in messages], default=str))
                encoded = encoded.replace('"$TASK"', json.dumps(ids[-1] if ids else "no-run-seen"))
            yield {0: DeltaToolCall(name=name, json_args=encoded)}
            return
        yield answered or "done"
        return
    async for chunk in llm._demo_stream(messages, info):
        yield chunk


llm.register_model("scripted", lambda: FunctionModel(stream_function=_scripted, model_name="scripted"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any] | None]:
    """The gateway.yaml database section for `world(gateway=...)`: SQLite (None), then PostgreSQL."""
    if request.param == "sqlite":
        yield None
    else:
        async with pg_database() as url:
            yield {"database": {"url": url}}
