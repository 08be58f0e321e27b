"""A sync delegate's question to the person who asked its parent (allow_questions): `ask_parent`.

The library's tool: pydantic-ai-harness `AskUser` (multiple-choice questions, a custom answer allowed),
offered to the delegate as `ask_parent`, whose answerer is the parent run's own question channel
(`Turn.ask`, `gateway/approvals/questions.py`): a card in the thread, an option as a button or an answer
of one's own as a reply, answered by the binding's deciders — never by a model. The seed's rule: only a
delegate that waits (sync) is given it, since a background delegate has handed back a task id with
nobody left to answer; and never a specialist the model invented (create_agent), whose instructions are
not the author's to put to a person.

An in-process wait with the question's timeout (`approvals.question_timeout`), not a parked run: the
delegate is inside its parent's tool call, and resuming it from a stored question after a restart would
need the delegate's half-finished model request stored the way a gated call is (`task` parks on
`ApprovalRequired`, whose result a question cannot carry). A restart while it waits ends the parent's
run as any restart mid-call does; nobody answering in time reaches the delegate as a decline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai_harness import AskUser
from pydantic_ai_harness.ask_user import AskUserAnswer, AskUserRequest, AskUserResponse
from pydantic_ai_harness.ask_user._toolset import TOOL_NAME

from gateway.approvals.questions import Answer, Ask, Asker, Field

ASK_PARENT = "ask_parent"
INSTRUCTIONS = (f"When the task is ambiguous in a way only the person who asked can settle, call `{ASK_PARENT}` "
                "with concrete options rather than guessing; it is put to that person and you wait for the answer. "
                "Ask rarely, and batch related questions into one call. If they decline, make a reasonable choice "
                "and say which one you made.")


def answerer(ask: Asker, delegate: str) -> Any:
    """The harness's `Answerer`, putting each request to the parent's person as one question card."""

    async def answer(request: AskUserRequest) -> AskUserResponse:
        text = "\n".join(f"{q.header}: {q.question}" for q in request.questions)
        fields = tuple(Field(q.header, q.header, "enum", tuple(o.label for o in q.options)) for q in request.questions)
        got: Answer = await ask(Ask(asker=f"The delegate {delegate}", text=text, fields=fields, free_text=True))
        if got.action != "accept":
            return AskUserResponse(cancelled=True)
        answers = []
        for q in request.questions:
            value = str(got.content.get(q.header, ""))
            if value in {o.label for o in q.options}:
                answers.append(AskUserAnswer(header=q.header, selected=(value,)))
            else:
                answers.append(AskUserAnswer(header=q.header, custom_answer=value))
        return AskUserResponse(answers=tuple(answers))

    return answer


@dataclass(kw_only=True)
class AsksParent(AskUser[Any]):
    """`AskUser`, its tool named `ask_parent` and its instructions saying whom it asks."""

    def get_instructions(self) -> Any:
        return INSTRUCTIONS

    def get_toolset(self) -> AbstractToolset[Any] | None:
        toolset = super().get_toolset()
        assert toolset is not None
        return toolset.renamed({ASK_PARENT: TOOL_NAME})
