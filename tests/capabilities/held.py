"""The scripted model, held: a prompt starting "HOLD:<name>" makes it wait, before its final answer, until the
test releases <name> (`gate(name).set()`): a background run, or a turn, still working when the test needs it.
"STEP:<name>" waits before its first step instead (its first model request has begun, so what the test does
meanwhile reaches the run at its second).

Registered as the model `held`; otherwise it answers exactly as `scripted` does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, DeltaToolCalls, FunctionModel

from gateway.runs import llm

from . import scripted

GATES: dict[str, asyncio.Event] = {}


def gate(name: str) -> asyncio.Event:
    return GATES.setdefault(name, asyncio.Event())


async def _held(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    prompt, made = scripted._since_prompt(messages)
    if prompt.startswith("HOLD:"):
        name = prompt[5:].split()[0]
        calls = json.loads(prompt[prompt.index(scripted.PREFIX) + len(scripted.PREFIX):]) if scripted.PREFIX in prompt else []
        if made >= len(calls):
            await gate(name).wait()
    elif prompt.startswith("STEP:") and made == 0:
        await gate(prompt[5:].split()[0]).wait()
    async for chunk in scripted._scripted(messages, info):
        yield chunk


llm.register_model("held", lambda: FunctionModel(stream_function=_held, model_name="held"))
