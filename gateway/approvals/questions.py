"""A question put to a person in the thread; the answer (or a decline, or the timeout) goes back to who asked.

One mechanism for three askers: an MCP server's elicitation (`gateway/mcp/elicitation.py`), a sampling
request under `sampling: ask` (`gateway/mcp/sampling.py`), and a sync delegate's `ask_parent`
(`capabilities/subagents.py`). Each hands `ask` an `Ask` (what it wants to know, as fields) and gets an
`Answer` back: accept with the values, decline (a person said no), or cancel (nobody answered in time, the
run was stopped, or the question was not asked at all). The MCP spec's three actions, which every asker maps.

Who may answer is the binding's approval rule (`approvals.deciders`, by default the person who asked the
agent), asked by the approval service on every door, so a question is answered by whoever could decide
a card there and nobody else; anyone else's click is refused to them alone, their reply is an ordinary
message. A form is asked one field at a time, on one card edited in place: a boolean or an enum as buttons
(the choice every platform draws natively), a string or a number as a reply in the thread (the one way
to type an answer that works on every platform and client; a Slack modal would be Slack's alone and needs
the click's short-lived trigger). Decline is always a button.

In-process, with a timeout (`approvals.question_timeout`, 10 minutes by default): every asker holds a live
request while it waits (an MCP server's open `tools/call`, a delegate inside its parent's tool call), so a
question cannot outlive its process the way a parked approval does. An answer to a question that is no
longer open (answered, expired, its process gone) is told so and changes nothing; so is one a platform
delivers to another replica (the limit of keeping it in memory, docs/approvals.md).

Bounded against an asker that floods: one open question per run at a time (a second, meanwhile, is
cancelled without being shown) and `MAX_PER_RUN` per run; the text is clipped, the buttons capped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.approvals.cards import who_decides
from gateway.approvals.service import Approvals
from gateway.outbound.adapter import (Adapter, AsksQuestions, DecisionOutcome, QuestionCard, ReplyTarget, Sender,
                                      offered)
from gateway.runs.turn import Turn
from gateway.store import repo

log = logging.getLogger("gateway.approvals.questions")

MAX_PER_RUN = 5  # questions one run may put to the person; past it the asker is told no at once
MAX_TEXT = 2000  # of a question's text, as shown
MAX_FIELDS = 10
KEPT_COUNTS = 1000  # runs whose question counts are remembered
MAX_CHOICES = 10  # an enum with more options is answered by a reply naming one
MAX_REPLY = 4000  # characters of a typed answer
NO_LONGER_OPEN = "This question is no longer open."
YES, NO, SKIP = "Yes", "No", "Skip"
_ACCEPT, _DECLINE, _SKIP = object(), object(), object()  # what a button answers, apart from a field's own values


@dataclass(frozen=True, slots=True)
class Field:
    """One value asked for: booleans and enums are buttons, strings and numbers a reply in the thread."""

    name: str
    title: str
    kind: Literal["boolean", "enum", "string", "number", "integer"]
    options: tuple[str, ...] = ()
    required: bool = True
    description: str = ""


@dataclass(frozen=True, slots=True)
class Ask:
    """What an asker wants to know. `asker` names who asks on the card, never the agent's own voice."""

    asker: str
    text: str
    fields: tuple[Field, ...] = ()
    accept: str = "Accept"  # the button of a question with no fields
    decline: str = "Decline"
    free_text: bool = False  # an enum field may also be answered with a reply of one's own


@dataclass(frozen=True, slots=True)
class Answer:
    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] = field(default_factory=dict)
    by: str = ""
    why: str = ""  # a cancel's reason: "expired", "busy", "limit", "unavailable"


Asker = Callable[[Ask], Awaitable[Answer]]


@dataclass
class _Open:
    id: str
    ask: Ask
    run_id: str
    conversation: repo.ConversationRef
    binding_id: str
    deciders: Any
    requester: Any  # the run's Requester
    target: ReplyTarget
    adapter: AsksQuestions
    future: asyncio.Future[Answer]
    ref: str = ""
    values: dict[str, Any] = field(default_factory=dict)
    step: int = 0

    @property
    def current(self) -> Field | None:
        return self.ask.fields[self.step] if self.step < len(self.ask.fields) else None

    def buttons(self) -> list[tuple[str, Any]]:
        """(label, what it answers) of the buttons shown now; a click carries its position."""
        f = self.current
        if not self.ask.fields:
            return [(self.ask.accept, _ACCEPT), (self.ask.decline, _DECLINE)]
        assert f is not None
        shown: list[tuple[str, Any]] = []
        if f.kind == "boolean":
            shown = [(YES, True), (NO, False)]
        elif f.kind == "enum" and len(f.options) <= MAX_CHOICES:
            shown = [(o, o) for o in f.options]
        if not f.required:
            shown.append((SKIP, _SKIP))
        return [*shown, (self.ask.decline, _DECLINE)]

    def replies(self) -> bool:
        f = self.current
        return f is not None and (f.kind in ("string", "number", "integer") or self.ask.free_text
                                  or (f.kind == "enum" and len(f.options) > MAX_CHOICES))

    def card(self, note: str = "") -> QuestionCard:
        f = self.current
        prompt = ""
        if f is not None and not note:
            prompt = f.title + (f" ({f.description})" if f.description else "")
            if f.kind == "enum" and len(f.options) > MAX_CHOICES:
                prompt += ": one of " + ", ".join(f.options)
        answered = tuple((g.title, _shown(self.values[g.name])) for g in self.ask.fields if g.name in self.values)
        who = f"{who_decides(self.deciders, self.requester.name)} can answer."
        buttons = self.buttons() if not note else []
        return QuestionCard(question_id=self.id, asker=self.ask.asker, text=_clip(self.ask.text), answered=answered,
                            prompt=prompt, choices=tuple(label for label, _ in buttons),
                            choice_ids=tuple(self.step * 100 + n for n in range(len(buttons))),
                            replies=self.replies() and not note, deciders=who, note=note)


class Questions:
    """The open questions of this process, each answered once by one of its deciders."""

    def __init__(self, approvals: Approvals, adapter_for: Callable[[str], Adapter | None]) -> None:
        self._approvals, self._adapter_for = approvals, adapter_for
        self._open: dict[str, _Open] = {}
        self._asked: dict[str, int] = {}  # questions asked per run, for the newest KEPT_COUNTS runs
        self._asking: set[str] = set()  # runs with a question open

    def asker_for(self, turn: Turn, adapter: Adapter) -> Asker | None:
        """How `turn` asks its person, or None where its platform cannot show a question."""
        shows = offered(adapter, AsksQuestions)
        if shows is None:
            return None
        return lambda ask: self.ask(turn, ask, shows)

    async def ask(self, turn: Turn, ask: Ask, adapter: AsksQuestions) -> Answer:
        root = _root(turn)
        if root.run_id in self._asking:
            log.info("run %s asked a second question while one is open; cancelled unasked", root.run_id)
            return Answer("cancel", why="busy")
        if self._asked.get(root.run_id, 0) >= MAX_PER_RUN:
            log.info("run %s has asked %d questions, the most one run may; cancelled unasked", root.run_id, MAX_PER_RUN)
            return Answer("cancel", why="limit")
        self._asked[root.run_id] = self._asked.get(root.run_id, 0) + 1
        while len(self._asked) > KEPT_COUNTS:  # the oldest runs' counts go (dicts keep insertion order)
            self._asked.pop(next(iter(self._asked)))
        ask = _bounded(ask)
        q = _Open(secrets.token_hex(16), ask, root.run_id, turn.conversation, turn.binding.id,
                  turn.binding.approvals.deciders, turn.requester, turn.target, adapter,
                  asyncio.get_running_loop().create_future())
        self._asking.add(root.run_id)
        self._open[q.id] = q
        note = "Closed: the run was stopped."
        try:
            try:
                q.ref = await adapter.post_question(turn.target, q.card())
            except Exception as e:
                log.warning("could not post question %s: %s", q.id, e)
                return Answer("cancel", why="unavailable")
            log.info("question %s asked in run %s (%s)", q.id, root.run_id, ask.asker, extra=turn.log_fields)
            timer = asyncio.ensure_future(turn.clock.sleep(turn.binding.approvals.question_timeout))
            try:
                await asyncio.wait({q.future, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
            if not q.future.done():
                q.future.set_result(Answer("cancel", why="expired"))
            answer = q.future.result()
            note = _note(answer)
            return answer
        finally:
            self._open.pop(q.id, None)
            self._asking.discard(root.run_id)
            if q.ref:
                await self._show(q, note)

    async def answer(self, question_id: str, choice: int, who: Sender, *, binding_id: str) -> DecisionOutcome:
        q = self._open.get(question_id)
        if q is None or q.binding_id != binding_id or q.future.done():
            return DecisionOutcome(False, NO_LONGER_OPEN)
        if not await self._may_answer(q, who):
            return DecisionOutcome(False, f"{who_decides(q.deciders, q.requester.name)} can answer this.")
        if q.future.done():  # it closed (answered, expired) while the deciders were asked
            return DecisionOutcome(False, NO_LONGER_OPEN)
        step, n = divmod(choice, 100)
        buttons = q.buttons()
        if step != q.step or not 0 <= n < len(buttons):
            return DecisionOutcome(False, "This button is no longer valid.")
        label, value = buttons[n]
        by = who.display_name or who.account_id
        if value is _ACCEPT or value is _DECLINE:
            accepted = value is _ACCEPT
            q.future.set_result(Answer("accept" if accepted else "decline", dict(q.values) if accepted else {}, by=by))
            return DecisionOutcome(True, f"{label}.", private=True)
        return await self._fill(q, None if value is _SKIP else value, by)

    async def reply(self, conversation_key: str, who: Sender, text: str,
                    record: Callable[[], Awaitable[bool]]) -> str | None:
        """A message in the conversation while one of its questions waits for a typed answer: what to tell
        its sender when it answered (or did not fit), None when it is no answer (no such question, the
        sender may not answer it, or `record` says it was delivered before): then it takes the ordinary path."""
        q = next((q for q in self._open.values() if q.conversation.key == conversation_key and q.replies()
                  and not q.future.done()), None)
        if q is None or not await self._may_answer(q, who) or not await record():
            return None
        if q.future.done():  # it closed while the deciders were asked: the message was one, too late
            return NO_LONGER_OPEN
        f = q.current
        assert f is not None
        value, refusal = _typed(f, text.strip()[:MAX_REPLY], q.ask.free_text)
        if refusal:
            return f"{refusal} Reply again, or use the question's buttons."
        await self._fill(q, value, who.display_name or who.account_id)
        return ""

    async def _fill(self, q: _Open, value: Any, by: str) -> DecisionOutcome:
        f = q.current
        assert f is not None
        if value is not None:
            q.values[f.name] = value
        q.step += 1
        if q.current is None:
            q.future.set_result(Answer("accept", dict(q.values), by=by))
            return DecisionOutcome(True, "Answered.", private=True)
        await self._show(q, "")
        return DecisionOutcome(True, "Noted.", private=True)

    async def _may_answer(self, q: _Open, who: Sender) -> bool:
        return await self._approvals.may_decide_as(q.deciders, who, q.requester.account_id, q.requester.person_id,
                                                   q.conversation)

    async def _show(self, q: _Open, note: str) -> None:
        try:
            await q.adapter.update_question(q.target, q.ref, q.card(note))
        except Exception as e:
            log.warning("could not update question %s: %s", q.id, e)


def _root(turn: Turn) -> Turn:
    """The run a person started: a delegate's question counts against its parent's run."""
    while turn.parent is not None:
        turn = turn.parent
    return turn


def _bounded(ask: Ask) -> Ask:
    fields = tuple(Field(f.name, _clip(f.title, 80), f.kind, tuple(_clip(o, 60) for o in f.options[:50]), f.required,
                         _clip(f.description, 200)) for f in ask.fields[:MAX_FIELDS])
    return Ask(_clip(ask.asker, 80), _clip(ask.text), fields, _clip(ask.accept, 30), _clip(ask.decline, 30),
               ask.free_text)


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    text = "".join(c if c.isprintable() or c == "\n" else " " for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _shown(value: Any) -> str:
    return YES if value is True else NO if value is False else _clip(str(value), 200)


def _note(answer: Answer) -> str:
    if answer.action == "accept":
        return f"Answered by {answer.by}."
    if answer.action == "decline":
        return f"Declined by {answer.by}."
    return "Expired: nobody answered in time." if answer.why == "expired" else "Closed."


def _typed(f: Field, text: str, free_text: bool) -> tuple[Any, str]:
    """A typed answer as the field's value, or why it does not fit."""
    if not text:
        return None, "That answer is empty."
    if f.kind == "integer":
        with contextlib.suppress(ValueError):
            return int(text), ""
        return None, f"{f.title} must be a whole number."
    if f.kind == "number":
        with contextlib.suppress(ValueError):
            return float(text), ""
        return None, f"{f.title} must be a number."
    if f.kind == "enum" and not free_text:
        found = next((o for o in f.options if o.casefold() == text.casefold()), None)
        return (found, "") if found is not None else (None, f"{f.title} must be one of: {', '.join(f.options)}.")
    if f.kind == "boolean" and not free_text:
        return None, "Use the buttons."
    return text, ""
