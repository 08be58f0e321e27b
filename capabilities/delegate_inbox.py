"""A background delegate's inbox: what its parent says to it while it works, kept in the store.

The parent's turn and the delegate's run may be on different replicas, and the parent's turn has
usually ended long before the delegate reads anything, so nothing here is held in memory: a steer
(send_message_to_subagent), a request to wrap up (soft_cancel_task) and the answer to its question
(answer_subagent) are capability state under the background run's id (`CapabilityState`, on SQLite
and PostgreSQL alike). Each is taken once: a message is delivered by deleting its key, and only the
caller whose delete removed it delivers it; a question and its answer are written insert-if-absent.
The inbox goes when the run ends, in the transaction that ends it (`BackgroundStore.end`), a crash's
end at the next start included.

`Steering` is what the delegate's run is given: before each model request it moves the messages
waiting in the store into the run with pydantic-ai's own `RunContext.enqueue` (the library's way to
steer a run), and after a final answer it looks once more, so a message that arrived while the
delegate wrote its answer redirects the run instead of being lost. A request to wrap up withholds the
tools from every later request, with a note saying why, so the next answer is the last.
`ask_parent` is the delegate's side of a question (allow_questions): it asks, the question is queued
into the parent's conversation as a turn of its own, and the delegate waits for answer_subagent.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.toolsets import FunctionToolset

from gateway.runs.background import QUESTION_HEAD
from gateway.runs.background import BackgroundRuns
from gateway.runs.turn import Turn
from gateway.store.background import INBOX as CAPABILITY
from gateway.store.background import QUESTION, QUESTION_TURN
from gateway.store.capability_state import CapabilityState

from .failures import trouble

MAX_MESSAGE_CHARS = 4000  # a steer, a question or an answer: a brief, not a document
ASK_TIMEOUT = 900.0  # how long a delegate waits for its answer (its own wall clock may end it sooner)
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

    async def question(self) -> str | None:
        """The question waiting for an answer, or None. (A question is asked with its turn, in one
        transaction: `BackgroundRuns.ask`.)"""
        question = await self._state.get(CAPABILITY, self.run_id, QUESTION)
        if question is None or await self._state.get(CAPABILITY, self.run_id, "answer") is not None:
            return None
        return question

    async def answer(self, text: str) -> bool:
        """Answer the waiting question, once: False when none waits or it was answered already."""
        if await self.question() is None:
            return False
        return await self._state.add(CAPABILITY, self.run_id, "answer", text)

    async def take_answer(self) -> str | None:
        """The answer to the question, which closes it (the delegate may ask another); None until there is one."""
        answer = await self._state.get(CAPABILITY, self.run_id, "answer")
        if answer is not None:
            await self.abandon()
        return answer

    async def abandon(self) -> None:
        """No answer came: the question is closed, so the delegate may ask another."""
        for key in (QUESTION, QUESTION_TURN, "answer"):
            await self._state.delete(CAPABILITY, self.run_id, key)


@dataclass
class Steering(AbstractCapability[Turn]):
    """The delegate's end of its inbox, as a pydantic-ai capability of its background run."""

    inbox: Inbox
    background: BackgroundRuns
    allow_questions: bool = False
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

    def get_toolset(self) -> Any:
        if not self.allow_questions:
            return None
        return FunctionToolset([Tool(self.ask_parent, name="ask_parent")])

    async def ask_parent(self, ctx: RunContext[Turn], question: str) -> str:
        """Ask the agent that delegated this task to you a question, and wait for its answer.

        Ask only what you cannot settle yourself and what changes the result (a choice between two readings
        of the task, a fact only the person knows). The parent answers when it gets to it, possibly after
        asking the person, so this can take minutes; meanwhile you do nothing else.

        Args:
            question: One question, self-contained (the parent reads it without your notes); at most 4000
                characters.

        Returns:
            The parent's answer; or, when none came within 15 minutes, a sentence saying so (go on with your
            best judgment and say what you assumed); or a refusal when an earlier question is still open.
        """
        question = question.strip()
        if not question or len(question) > MAX_MESSAGE_CHARS:
            return trouble(ctx, "mistake", f"Ask one question of 1 to {MAX_MESSAGE_CHARS} characters.")
        row = await self.background.db.get(self.inbox.run_id)
        if row is None:
            return "Nobody can be asked any more (this run is ending). Go on with your best judgment."
        who = row.requester_name or "someone"
        text = (f"{QUESTION_HEAD} {row.id[:8]} ({row.delegate}, started by {who}), waiting for an answer:\n\n"
                f"{question}\n\nAnswer with answer_subagent(task_id=\"{row.id}\", answer=...).")
        asked = await self.background.ask(self.inbox.run_id, question, text)
        if asked == "":
            return "Your earlier question is still waiting for its answer; ask again once it has come."
        if asked is None:
            return "Nobody can be asked any more (this run is ending). Go on with your best judgment."
        answer = await self.background.until(self.inbox.take_answer, ASK_TIMEOUT)
        if answer is None:
            await self.background.db.drop_question(self.inbox.run_id, "no answer came in time")
            await self.inbox.abandon()
            return ("No answer came within 15 minutes. Go on with your best judgment, and say in your answer what "
                    "you assumed.")
        return answer
