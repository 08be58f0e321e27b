"""The one loop over a pydantic-ai run's events, to its result: the runner's turns, sync delegates and
background delegates all drive their agent through it, each with what it does on an event.

Streamed, always: the models the runner builds are used streaming, and a run's events are how each
caller shows progress (the runner its reply, a background delegate its saved transcript).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from pydantic_ai import Agent, AgentRunResultEvent, CancellationToken, DeferredToolResults
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelMessage, UserContent
from pydantic_ai.run import AgentRunResult
from pydantic_ai.usage import RunUsage, UsageLimits

OnEvent = Callable[[Any], Awaitable[None]]


async def run_agent(
    agent: Agent[Any, Any],
    prompt: str | Sequence[UserContent] | None,
    *,
    deps: Any,
    history: list[ModelMessage] | None = None,
    deferred: DeferredToolResults | None = None,
    usage: RunUsage | None = None,
    usage_limits: UsageLimits | None = None,
    cancellation_token: CancellationToken | None = None,
    timeout: float | None = None,
    on_event: OnEvent | None = None,
    capabilities: Sequence[AbstractCapability[Any]] = (),
) -> AgentRunResult[Any]:
    """Run `agent` to its result, handing every event (the result's own included) to `on_event` as it comes.
    `capabilities` join this run only (a background delegate's inbox). What the run raises (a limit, a
    cancellation, a failure) is the caller's to handle."""
    result: AgentRunResult[Any] | None = None
    async with agent.run_stream_events(
        prompt, message_history=history, deferred_tool_results=deferred, deps=deps, usage=usage,
        usage_limits=usage_limits, cancellation_token=cancellation_token, timeout=timeout,
        capabilities=list(capabilities) or None,
    ) as events:
        async for event in events:
            if isinstance(event, AgentRunResultEvent):
                result = event.result
            if on_event is not None:
                await on_event(event)
    if result is None:
        raise RuntimeError("the agent's event stream ended without a result")
    return result
