"""When a run's answer is written, read from pydantic-ai's own events (`gateway.runs.runner.AnswerEnd`).

The runner shows the answer at that moment instead of after the run's end; a response that goes on to
call a tool is no answer yet (the run continues, and a quick one must stay one post)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, PartEndEvent, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs.runner import AnswerEnd


async def _written(stream_function: object) -> list[str]:
    """Run an agent with one tool on `stream_function`; each moment `AnswerEnd` says the answer is
    written, the text that had ended there."""
    agent: Agent[None, str] = Agent(FunctionModel(stream_function=stream_function))  # type: ignore[arg-type]

    @agent.tool_plain
    def look(what: str) -> str:
        """Look something up."""
        return f"{what}: found"

    watch, written = AnswerEnd(), []
    async with agent.run_stream_events("hi") as events:
        async for event in events:
            if watch.written(event):
                assert isinstance(event, PartEndEvent)
                written.append(event.part.content)  # type: ignore[union-attr]
    return written


def _called(messages: list[ModelMessage]) -> bool:
    return any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts)


async def test_a_text_answer_is_written_once_at_its_end() -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        yield "Quick "
        yield "answer."

    assert await _written(stream) == ["Quick answer."]


CALL: DeltaToolCalls = {0: DeltaToolCall(name="look", json_args=json.dumps({"what": "x"}), tool_call_id="c1")}


@pytest.mark.parametrize("first", [["Let me look. ", CALL], [CALL, "Looking."]],
                         ids=["text-then-call", "call-then-text"])
async def test_a_response_that_calls_a_tool_is_not_the_answer_the_one_after_it_is(
        first: list[str | DeltaToolCalls]) -> None:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        if _called(messages):
            yield "Found it."
            return
        for piece in first:
            yield piece

    assert await _written(stream) == ["Found it."]
