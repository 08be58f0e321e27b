"""Runs of one agent at once, through its one shared Agent, each mid-way while another reads or writes.

The model ("interleaved") is scripted per run, by the run's prompt: `PLAN[prompt]` is what it does at each
request, an awaitable giving (tool, args), or None to answer "done". A step may wait for another run's
step (`step(..., after=event)`) and say it was taken (`signal=event`). What each run's model was sent is
kept: `SHOWN[prompt]` (every request's instructions and its tool results, in order), `SENT[prompt]` (each
request's messages). Used to show that a capability built once (`CapabilityDecl.shared`) keeps no run's
state: the runs must each see only their own.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, ToolReturnPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from gateway.runs import llm
from gateway.runs.agent_run import run_agent
from gateway.runs.runner import TurnAgent
from gateway.runs.turn import Turn
from gateway.store import repo

from .support import World

Action = tuple[str, dict[str, Any]] | None
PLAN: dict[str, list[Callable[[], Awaitable[Action]]]] = {}
SHOWN: dict[str, list[str]] = {}
SENT: dict[str, list[list[ModelMessage]]] = {}


async def _interleaved(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    first = messages[0]
    assert isinstance(first, ModelRequest)
    content = next(p.content for p in first.parts if isinstance(p, UserPromptPart))
    # The person's words; a capability may have added to them (planning's cache point).
    prompt = content if isinstance(content, str) else next(c for c in content if isinstance(c, str))
    SENT.setdefault(prompt, []).append(list(messages))
    shown = SHOWN.setdefault(prompt, [])
    shown.append(info.instructions or "")
    last = messages[-1]
    if isinstance(last, ModelRequest):
        shown.extend(str(p.content) for p in last.parts if isinstance(p, ToolReturnPart))
    n = sum(isinstance(m, ModelResponse) for m in messages)
    action = await PLAN[prompt][n]() if n < len(PLAN[prompt]) else None
    if action is None:
        yield "done"
        return
    tool, args = action
    yield {0: DeltaToolCall(name=tool, json_args=json.dumps(args), tool_call_id=f"{prompt}-{n}")}


llm.register_model("interleaved", lambda: FunctionModel(stream_function=_interleaved, model_name="interleaved"))


def script(plans: dict[str, list[Callable[[], Awaitable[Action]]]]) -> None:
    PLAN.clear()
    SHOWN.clear()
    SENT.clear()
    PLAN.update(plans)


def step(tool: str | None, *, after: asyncio.Event | None = None, signal: asyncio.Event | None = None,
         **args: Any) -> Callable[[], Awaitable[Action]]:
    """A model step: say `signal` was reached, wait for `after`, then call `tool` (None: answer)."""

    async def take() -> Action:
        if signal is not None:
            signal.set()
        if after is not None:
            await after.wait()
        return None if tool is None else (tool, args)

    return take


async def at_once(w: World, *runs: tuple[Turn, str]) -> list[TurnAgent]:
    """Run each (turn, prompt; the prompt names its plan) at once; each run's agent, all through one shared Agent."""
    agents = [w.gw.runner.build_agent(turn) for turn, _ in runs]
    assert all(isinstance(a, TurnAgent) for a in agents)
    shared = {id(a.wrapped) for a in agents}  # type: ignore[attr-defined]
    assert len(shared) == 1, "the runs go through the agent's one shared Agent"
    outputs = await asyncio.wait_for(asyncio.gather(*(run_agent(a, prompt, deps=turn)
                                                      for a, (turn, prompt) in zip(agents, runs, strict=True))), 30)
    assert [str(o.output) for o in outputs] == ["done"] * len(runs)
    for turn, _ in runs:
        await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply="done")
    return agents  # type: ignore[return-value]
