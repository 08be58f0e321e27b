"""system_reminders: steering text re-stated on a cadence, counted across the whole conversation.

The injection is pydantic-ai-harness's `SystemReminders`: a fired reminder is appended to the tail
of that one request behind a cache breakpoint, so it reaches the model and never enters the stored
history. Its three kinds are the harness's `Reminder` (a fixed line), a goal re-anchor and its
`LLMReminder` (a nudge the run's own model writes; metered on the run's usage, under its request
limit minus one, falling back to the goal line on any error).

What is ours, because the seed's rule differs from the harness's:

- The cadence counts model requests across the conversation and is durable: the harness resets its
  counters every run (`for_run`); here they are read from `Turn.state` (capability
  `system_reminders`, scope = `Turn.scope(..., "conversation")`: the conversation id, a delegate's own
  run unless lent) when the run starts and written back after each
  request, so "every ten requests" keeps counting across turns and restarts. `max_fires` caps a
  kind over the conversation, not over one run.
- The harness evaluates its dynamic reminders on every request; here the goal re-anchor and the LLM
  reminder take `interval`, `first_after` and `max_fires` like a fixed reminder (`_Cadenced`).
- The goal is the run's own request (the prompt this run answers): the harness's `GoalReanchor`
  takes the first user message in the history, which here is the oldest line of the conversation.
- The LLM reminder inherits the run's model (`ctx.model`) rather than naming one in config.
"""

from __future__ import annotations

import json
import logging
from copy import copy
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import ModelRequest, UserPromptPart
from pydantic_ai.tools import RunContext
from pydantic_ai_harness.system_reminders import LLMReminder, Reminder, SystemReminders

from gateway.runs.turn import Turn

from .registry import BuildContext, CapabilityDecl, register

log = logging.getLogger("gateway.capabilities.system_reminders")

CAPABILITY = "system_reminders"
STATE_KEY = "cadence"


class Cadence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    interval: int = Field(default=10, ge=1, le=10_000, description="fire every N model requests of the conversation")
    first_after: int | None = Field(default=None, ge=1, le=1_000_000,
                                    description="the request number of the first fire (default: the interval)")
    max_fires: int | None = Field(default=None, ge=1, le=100_000,
                                  description="at most this many fires over the conversation (default: no cap)")


class FixedReminder(Cadence):
    text: str = Field(min_length=1, max_length=4_000, description="the line to re-state")


class LlmReminderConfig(Cadence):
    max_context_messages: int = Field(default=10, ge=1, le=100,
                                      description="recent messages the reminder is written from")


class SystemRemindersConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reminders: list[FixedReminder] = Field(default_factory=list, max_length=20,
                                           description="fixed lines, each with its cadence (no model cost)")
    goal_reanchor: Cadence | None = Field(default=None, description="re-state the run's request as the anchor "
                                                                    "(no model cost)")
    llm_reminder: LlmReminderConfig | None = Field(default=None, description="a short nudge the run's model writes "
                                                                             "from the recent transcript (one model "
                                                                             "call per fire)")
    cache_ttl: Literal["5m", "1h"] = Field(default="5m", description="lifetime of the cache breakpoint before a "
                                                                     "reminder")


@dataclass
class _Tally:
    """The conversation's request counter and fires per kind, as read at run start and written per request."""

    requests: int = 0
    fires: dict[str, int] = field(default_factory=dict)

    def due(self, kind: str, cadence: Cadence) -> bool:
        base = cadence.first_after if cadence.first_after is not None else cadence.interval
        count = self.requests
        if count < base or (count - base) % cadence.interval:
            return False
        return cadence.max_fires is None or self.fires.get(kind, 0) < cadence.max_fires

    def dump(self) -> str:
        return json.dumps({"requests": self.requests, "fires": self.fires})

    @classmethod
    def load(cls, value: str | None) -> _Tally:
        if not value:
            return cls()
        data = json.loads(value)
        return cls(int(data.get("requests", 0)), {str(k): int(v) for k, v in data.get("fires", {}).items()})


def run_goal(ctx: RunContext[Any]) -> str | None:
    """The request this run answers: its prompt, or (resumed after an approval) the latest user message."""
    if isinstance(ctx.prompt, str) and ctx.prompt.strip():
        return ctx.prompt
    for message in reversed(ctx.messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str) and part.content.strip():
                    return part.content
    return None


def goal_line(ctx: RunContext[Any]) -> str:
    goal = run_goal(ctx)
    if goal is None:
        return "Stay on task."
    return (f'The request you are answering is: "{goal}". Check that your next action advances it. '
            "If it is already satisfied, give the final answer.")


@dataclass
class _Cadenced:
    """A dynamic kind (goal re-anchor, LLM reminder) fired on its own cadence of the conversation's requests."""

    kind: str
    cadence: Cadence
    tally: _Tally
    llm: LlmReminderConfig | None = None

    async def __call__(self, ctx: RunContext[Any]) -> str | None:
        if not self.tally.due(self.kind, self.cadence):
            return None
        self.tally.fires[self.kind] = self.tally.fires.get(self.kind, 0) + 1
        if self.llm is None:
            return goal_line(ctx)
        # The run's own model, metered on the run's usage; any failure falls back to the goal line.
        reminder: LLMReminder[Any] = LLMReminder(model=ctx.model, max_context_messages=self.llm.max_context_messages)
        try:
            return await reminder._generate(ctx) or goal_line(ctx)
        except Exception as e:
            log.info("LLM reminder fell back to the goal line: %r", e)
            return goal_line(ctx)


@dataclass
class ConversationReminders(SystemReminders[Turn]):
    """The harness's injection with the cadence counted per conversation and kept in `Turn.state`.

    Built once for the config (`shared`): `turn` is None on the built one and each run's copy (`for_run`)
    is bound to the run it is for, read from the run's deps, so a run counts only its own conversation."""

    config: SystemRemindersConfig | None = None
    turn: Turn | None = None
    _tally: _Tally = field(default_factory=_Tally, init=False, repr=False, compare=False)

    async def for_run(self, ctx: RunContext[Turn]) -> ConversationReminders:
        clone = copy(await super().for_run(ctx))
        clone.turn = ctx.deps
        assert clone.config is not None
        tally = _Tally.load(await clone.turn.state.get(CAPABILITY, clone.turn.scope(CAPABILITY, "conversation"), STATE_KEY))
        clone._tally = tally
        clone._request_count = tally.requests
        clone._fire_counts = {id(r): tally.fires.get(f"reminder:{i}", 0) for i, r in enumerate(clone.reminders)}
        dynamic: list[Any] = []
        if clone.config.goal_reanchor is not None:
            dynamic.append(_Cadenced("goal_reanchor", clone.config.goal_reanchor, tally))
        if clone.config.llm_reminder is not None:
            dynamic.append(_Cadenced("llm_reminder", clone.config.llm_reminder, tally, llm=clone.config.llm_reminder))
        clone.dynamic_reminders = tuple(dynamic)
        clone._dynamic_snapshot = tuple(dynamic)
        return clone

    async def wrap_model_request(self, ctx: RunContext[Turn], *, request_context: Any, handler: Any) -> Any:
        messages = request_context.messages
        counted = bool(messages) and isinstance(messages[-1], ModelRequest)  # the harness counts the same requests
        if counted:
            self._tally.requests = self._request_count + 1
        response = await super().wrap_model_request(ctx, request_context=request_context, handler=handler)
        if counted:
            await self._save()
        return response

    async def _save(self) -> None:
        assert self.turn is not None
        for i, reminder in enumerate(self.reminders):
            self._tally.fires[f"reminder:{i}"] = self._fire_counts.get(id(reminder), 0)
        try:
            await self.turn.state.put(CAPABILITY, self.turn.scope(CAPABILITY, "conversation"), STATE_KEY,
                                      self._tally.dump())
        except Exception as e:  # a counter that did not advance is a reminder a request late, not a failed run
            log.warning("could not store the reminder cadence of %s: %s", self.turn.conversation.id, e)


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    config = ctx.config
    assert isinstance(config, SystemRemindersConfig)
    if not (config.reminders or config.goal_reanchor or config.llm_reminder):
        return None  # no kind set: contributes nothing, dropped from the run
    fixed = [Reminder[Turn](r.text, interval=r.interval, first_after=r.first_after, max_fires=r.max_fires)
             for r in config.reminders]
    # The harness refuses an empty configuration; the dynamic kinds are bound per run (for_run).
    placeholder: list[Any] = [] if fixed else [lambda ctx: None]
    return ConversationReminders(reminders=fixed, dynamic_reminders=placeholder, cache_ttl=config.cache_ttl,
                                 config=config)


register(CapabilityDecl(
    id=CAPABILITY, name="System reminders", category="reasoning", tools=(), build=build,
    config_model=SystemRemindersConfig,
    # The reminders are the config's; the cadence is the conversation's, read and written by each run's own
    # copy (`ConversationReminders.for_run`, bound to the run's deps), never by the built one.
    shared=True,
    description="Re-states steering guidance on a cadence of the conversation's model requests (fixed lines, the "
                "run's goal, or a nudge the model writes), appended to that request only, never to the history.",
))
