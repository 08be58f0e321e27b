"""A background delegate's inbox: what its parent says to it while it works, kept in the store.

The parent's turn and the delegate's run may be on different replicas, and the parent's turn has
usually ended long before the delegate reads anything, so nothing here is held in memory: a steer
(send_message_to_subagent) and a request to wrap up (soft_cancel_task) are capability state under
the background run's id (`CapabilityState`, on SQLite and PostgreSQL alike). Each is taken once: a
message is delivered by deleting its key, and only the caller whose delete removed it delivers it; a
wrap-up is written insert-if-absent.
The inbox goes when the run ends, in the transaction that ends it (`BackgroundStore.end`), a crash's
end at the next start included.

`Steering` is what the delegate's run is given: before each model request it moves the messages
waiting in the store into the run with pydantic-ai's own `RunContext.enqueue` (the library's way to
steer a run), and after a final answer it looks once more, so a message that arrived while the
delegate wrote its answer redirects the run instead of being lost. A request to wrap up withholds the
tools from every later request, with a note saying why, so the next answer is the last.
A background delegate asks nobody anything (no ask_parent): nobody is left to answer it.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, ToolCallPart

from gateway.runs.turn import Turn
from gateway.store.background import INBOX as CAPABILITY
from gateway.store.capability_state import CapabilityState

MAX_MESSAGE_CHARS = 4000  # a steer: a brief, not a document
WRAP_UP = ("[From the agent that delegated this task to you: wrap up now. Stop calling tools and answer with "
           "what you have, saying what is missing.]")


def steer_text(text: str) -> str:
    return f"[A message from the agent that delegated this task to you, while you work on it]\n{text}"


class Inbox:
    """One background run's inbox in the store."""

    def __init__(self, state: CapabilityState, run_id: str) -> None:
        self._state, self.run_id = state, run_id

    async def send(self, text: str) -> None:
        # Keys sort in the order sent (`items` is in key order); the random tail keeps two sends apart.
        await self._state.put(CAPABILITY, self.run_id, f"m:{time.time_ns():020d}:{secrets.token_hex(4)}", text)

    async def take(self) -> list[str]:
        """The messages waiting, oldest first, each taken once (the delete decides who delivers it)."""
        taken: list[str] = []
        for key, text in (await self._state.items(CAPABILITY, self.run_id)).items():
            if key.startswith("m:") and await self._state.delete(CAPABILITY, self.run_id, key):
                taken.append(text)
        return taken

    async def ask_wrap_up(self, who: str) -> bool:
        """False when a wrap-up was already asked for."""
        return await self._state.add(CAPABILITY, self.run_id, "wrap_up", who)

    async def wrap_up(self) -> str | None:
        """Who asked it to wrap up, or None."""
        return await self._state.get(CAPABILITY, self.run_id, "wrap_up")

@dataclass
class Steering(AbstractCapability[Turn]):
    """The delegate's end of its inbox, as a pydantic-ai capability of its background run."""

    inbox: Inbox
    _wrapping: bool = field(default=False, init=False)

    async def before_model_request(self, ctx: RunContext[Turn], request_context: Any) -> Any:
        for text in await self.inbox.take():
            ctx.enqueue(steer_text(text))
        if not self._wrapping and await self.inbox.wrap_up() is not None:
            self._wrapping = True
            ctx.enqueue(WRAP_UP)
        if self._wrapping:  # no more tools: the answer this request gets is the last
            params = replace(request_context.model_request_parameters, function_tools=[])
            return replace(request_context, model_request_parameters=params)
        return request_context

    async def after_model_request(self, ctx: RunContext[Turn], *, request_context: Any,
                                  response: ModelResponse) -> ModelResponse:
        final = not any(isinstance(p, ToolCallPart) for p in response.parts)
        if final and not self._wrapping:
            # Sent while it wrote its answer: enqueued now, the run is redirected to it rather than ending.
            for text in await self.inbox.take():
                ctx.enqueue(steer_text(text))
        return response
