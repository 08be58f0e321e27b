"""A plugin module for delegation tests: the ops plugin (gated `deploy`) and a `test:lead` model that delegates.

`test:lead` reads "delegate <agent> <prompt>": it calls `task(agent, prompt)` once ("send <agent> <prompt>":
`send_to_agent(agent, prompt, wait=true)`), then answers "<tool> said: <the tool's result>". Anything
else it echoes. `test:ops-anywhere` deploys the service named after "deploy" anywhere in its prompt
(a handoff's message arrives inside an envelope). Every model request it answers is
counted in LEAD_REQUESTS, so a test can see a parent was not run twice.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs.llm import register_model

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
    found = re.search(r"\b(delegate|send) (\S+) (.+)", prompt, re.S)  # in a group the prompt starts "Ada: "
    if found:
        verb, agent, rest = found.groups()
        LEAD_REQUESTS.append(verb)
        call = (("task", {"agent": agent, "prompt": rest}) if verb == "delegate"
                else ("send_to_agent", {"agent": agent, "message": rest, "wait": True}))
        yield {0: DeltaToolCall(name=call[0], json_args=json.dumps(call[1]), tool_call_id=f"lead-{agent}")}
        return
    yield f"echo: {prompt}"


async def _ops_anywhere(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    last = messages[-1]
    returns = [p for p in last.parts if isinstance(p, ToolReturnPart)] if isinstance(last, ModelRequest) else []
    if returns:
        yield "".join(f"[{p.tool_name}: {p.content}] " for p in returns)
        return
    prompt = str(next(p.content for p in reversed(last.parts) if isinstance(p, UserPromptPart)))
    found = re.search(r"\bdeploy (\w+)", prompt)
    if found is None:
        yield f"echo: {prompt}"
        return
    yield {0: DeltaToolCall(name="deploy", json_args=json.dumps({"service": found.group(1)}), tool_call_id="ops-0")}


register_model("test:lead", lambda: FunctionModel(stream_function=_lead))
register_model("test:ops-anywhere", lambda: FunctionModel(stream_function=_ops_anywhere))
