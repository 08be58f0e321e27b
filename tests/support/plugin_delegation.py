"""A plugin module for delegation tests: the ops plugin (gated `deploy`) and a `test:lead` model that delegates.

`test:lead` reads "delegate <agent> <prompt>": it calls `task(agent, prompt)` once, then answers
"<agent> said: <the tool's result>". Anything else it echoes. Every model request it answers is
counted in LEAD_REQUESTS, so a test can see a parent was not run twice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.llm import register_model

from . import plugin_ops  # noqa: F401  (registers test_ops and test:ops)

LEAD_REQUESTS: list[str] = []


async def _lead(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        LEAD_REQUESTS.append("answer")
        for p in returns:
            yield f"{p.tool_name} said: {p.content}"
        return
    prompt = str(next(p.content for p in reversed(last.parts) if isinstance(p, UserPromptPart)))
    words = prompt[prompt.find("delegate "):].split(maxsplit=2)  # in a group the prompt starts "Ada: "
    if len(words) == 3 and words[0] == "delegate":
        LEAD_REQUESTS.append("delegate")
        yield {0: DeltaToolCall(name="task", json_args=json.dumps({"agent": words[1], "prompt": words[2]}),
                                tool_call_id=f"lead-{words[1]}")}
        return
    yield f"echo: {prompt}"


register_model("test:lead", lambda: FunctionModel(stream_function=_lead))
