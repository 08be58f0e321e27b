"""What the memory-card tests share: a model that reports what it was given, and notes to seed.

The model answers a message by calling `list_memory` once and records, per run, the
instructions it was given (where the MEMORY.md index is injected in a DM) and what the tool
returned: "the note is no longer given to the next run" is asserted on what a model received.
A message `remember NAME: TEXT` is answered by writing that note instead.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs.llm import register_model
from gateway.store.notes import INDEX, Holder, NoteStore
from gateway.store.repo import Store

MODEL = "memory-cards-recorder"


@dataclass
class Given:
    instructions: str
    listed: str


GIVEN: list[Given] = []


def _model() -> FunctionModel:
    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        last = messages[-1]
        returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
        prompt = next((str(p.content) for p in last.parts if isinstance(p, UserPromptPart)), "")
        if not returns and "remember " in prompt:
            name, _, text = prompt.split("remember ", 1)[1].partition(": ")
            yield {0: DeltaToolCall(name="write_memory", json_args=json.dumps({"name": name, "content": text}),
                                    tool_call_id="call-write")}
            return
        if not returns:
            yield {0: DeltaToolCall(name="list_memory", json_args="{}", tool_call_id="call-list")}
            return
        GIVEN.append(Given(info.instructions or "", str(returns[-1].content)))
        yield "noted"

    return FunctionModel(stream_function=stream)


def register() -> str:
    GIVEN.clear()
    register_model(MODEL, _model)
    return MODEL


AGENT = {"name": "Keeper", "model": MODEL, "capabilities": [{"id": "memory_files"}]}


async def seed(store: Store, holder: Holder, notes: dict[str, str]) -> None:
    """Notes of agent `assistant` for `holder`, and an index line naming each."""
    scope = holder.scope("assistant")
    for name, content in notes.items():
        await NoteStore(store).write(scope, name, content)
    await NoteStore(store).write(scope, INDEX, "".join(f"- {name}: {content}\n" for name, content in notes.items()))


def note_names(listed: str) -> set[str]:
    """The note names a `list_memory` answer shows."""
    return {line.split(" — ", 1)[0] for line in listed.splitlines() if " — " in line}
