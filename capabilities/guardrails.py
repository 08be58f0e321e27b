"""guardrails: the text flowing through a run is redacted, or the run is ended, at three edges.

The guards are pydantic-ai-harness's: `InputGuardrail` (the run's prompt), `OutputGuardrail` (the
answer), `ToolGuardrail` (what a tool returned, before the model reads it; it sits innermost, so it
sees a return before tool_output_limits spills it), with the `detectors` module's redactors and
keyword matcher. The config selects and parameterises them; an agent is data, not a Python guard.

Where the seed's rules differ from the harness's defaults, this module says so:

- A blocked keyword ends the run (status `guardrail_blocked`, a line in the chat) on every edge. The
  harness answers a blocked input with a refusal and replaces a blocked tool result with one, so
  here the input and tool-result guards raise its `InputBlocked` / `ToolBlocked` instead.
- Our history is rebuilt from the transcript every turn, so a secret pasted three turns ago would
  reach the model again; the harness's input guard reads only the run's own prompt. The input
  redactors are also applied, request-only, to the earlier prompts of the history.
- The answer is streamed into the chat as the model writes it, which would show a person what the
  output guard is about to rewrite. With an output edge configured, each model response's text is
  held back until it is complete, screened by the same detectors, and shown in one piece (a blocked
  one is not shown at all).
- A prompt that carries shared files is screened part by part: the person's words are redacted (or end
  the run), the files go to the model as they are (they are data; the harness would refuse to redact
  such a prompt at all). The tool-result edge is where untrusted content is screened.
- A structured tool result (an MCP server's JSON) is screened as its JSON text; a redaction then
  hands the model the redacted JSON text.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_ai.capabilities import AbstractCapability, CombinedCapability
from pydantic_ai.messages import (
    ModelRequest,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    UserPromptPart,
)
from pydantic_ai.tools import RunContext
from pydantic_ai_harness.guardrails import (
    GuardrailResult,
    InputBlocked,
    InputGuardrail,
    OutputGuardrail,
    ToolBlocked,
    ToolGuardrail,
    ToolResultInfo,
    detectors,
)

from gateway.inbound.attachments import FILE_TAG
from gateway.runs.turn import Turn

from .registry import BuildContext, CapabilityDecl, register

Detector = Callable[[object], GuardrailResult]
EDGES = ("in", "out", "tool")
_SEPARATORS = re.compile(r"[,\n]")


def keyword_list(text: str) -> list[str]:
    """Comma- or newline-separated terms, trimmed, empty ones dropped."""
    return [t.strip() for t in _SEPARATORS.split(text) if t.strip()]


def _keywords_field(edge: str) -> Any:
    return Field(default="", description=f"comma- or newline-separated terms; one in {edge} ends the run "
                                         "(case-insensitive)")


class GuardrailsConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    redact_secrets_in: bool = Field(default=False, description="scrub API keys, tokens, JWTs and PEM blocks from "
                                                               "the person's message")
    redact_pii_in: bool = Field(default=False, description="scrub email, IBAN, card and US SSN from the person's "
                                                           "message")
    blocked_keywords_in: str = _keywords_field("the person's message")
    redact_secrets_out: bool = Field(default=False, description="scrub API keys, tokens, JWTs and PEM blocks from "
                                                                "the answer")
    redact_pii_out: bool = Field(default=False, description="scrub email, IBAN, card and US SSN from the answer")
    blocked_keywords_out: str = _keywords_field("the answer")
    redact_secrets_tool: bool = Field(default=False, description="scrub API keys, tokens, JWTs and PEM blocks from "
                                                                 "what a tool returned, before the model reads it")
    redact_pii_tool: bool = Field(default=False, description="scrub email, IBAN, card and US SSN from what a tool "
                                                             "returned, before the model reads it")
    blocked_keywords_tool: str = _keywords_field("what a tool returned")

    @field_validator("blocked_keywords_in", "blocked_keywords_out", "blocked_keywords_tool")
    @classmethod
    def _terms(cls, v: str) -> str:
        if v.strip() and not keyword_list(v):
            raise ValueError("holds separators and no term; leave it empty to block nothing")
        return v

    def edge(self, edge: str) -> tuple[bool, bool, list[str]]:
        return (getattr(self, f"redact_secrets_{edge}"), getattr(self, f"redact_pii_{edge}"),
                keyword_list(str(getattr(self, f"blocked_keywords_{edge}"))))


def _chain(steps: Sequence[Detector]) -> Detector:
    """One detector from several: the first block wins, a replacement is what the next one reads."""

    def detect(text: object) -> GuardrailResult:
        current, changed = text, False
        for step in steps:
            verdict = step(current)
            if verdict.action == "block":
                return verdict
            if verdict.action == "replace":
                current, changed = verdict.replacement, True
        return GuardrailResult.replace(current) if changed else GuardrailResult.allow()

    return detect


def _blocker(terms: list[str], edge: str) -> Detector:
    return detectors.blocked_keywords(terms, message=f"blocked term in {edge}")


def _redactors(secrets: bool, pii: bool) -> list[Detector]:
    return [d for on, d in ((secrets, detectors.redact_secrets), (pii, detectors.redact_personal_data)) if on]


def _detector(config: GuardrailsConfig, edge: str, where: str) -> Detector | None:
    secrets, pii, terms = config.edge(edge)
    steps = ([_blocker(terms, where)] if terms else []) + _redactors(secrets, pii)
    return _chain(steps) if steps else None


@dataclass
class _PromptGuardrail(InputGuardrail[Turn]):
    """The harness's input guard, also for a prompt that carries files: it screens the person's words
    part by part and passes the files through as they are (data, not what the person said). The harness
    refuses a redaction of a multimodal prompt outright (one string written over a list of parts would
    drop the files), which failed every guarded run a file was shared with."""

    async def wrap_model_request(self, ctx: RunContext[Turn], *, request_context: Any, handler: Any) -> Any:
        part = _latest_prompt(request_context.messages) if ctx.run_step <= 1 else None
        if part is None or isinstance(part.content, str):
            return await super().wrap_model_request(ctx, request_context=request_context, handler=handler)
        screened: list[Any] = []
        for item in part.content:
            verdict = self.guard(item) if _words(item) else GuardrailResult.allow()  # type: ignore[operator, misc]
            screened.append(verdict.replacement if verdict.action == "replace" else item)
        part.content = screened  # in the run's history too, as the harness does: the redacted text is not kept
        return await handler(request_context)


def _latest_prompt(messages: Sequence[Any]) -> UserPromptPart | None:
    for message in reversed(messages):
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart):
                return part
    return None


def _words(item: object) -> bool:
    """A text part of a prompt that is the person's (or the gateway's) words, not a shared file's contents."""
    return isinstance(item, str) and not item.startswith(FILE_TAG)


def _raising_input(detect: Detector) -> Callable[[str], GuardrailResult]:
    def guard(prompt: str) -> GuardrailResult:
        verdict = detect(prompt)
        if verdict.action == "block":
            raise InputBlocked(verdict.message or "blocked term in the person's message")
        return verdict

    return guard


def _tool_result_guard(detect: Detector) -> Callable[[ToolResultInfo], GuardrailResult]:
    as_text = detectors.for_tool_result_text(detect, on_other="raise")

    def guard(info: ToolResultInfo) -> GuardrailResult:
        result = info.result
        try:
            verdict = as_text(info)
        except Exception:  # structured: screen its JSON text
            text = json.dumps(result, default=str, ensure_ascii=False)
            verdict = detect(text)
            if verdict.action == "replace":
                verdict = GuardrailResult.replace(verdict.replacement)
        if verdict.action == "block":
            raise ToolBlocked(info.name, verdict.message)
        return verdict

    return guard


@dataclass
class _EarlierPrompts(AbstractCapability[Turn]):
    """The input redactors over the history's earlier prompts (request-only: the transcript is unchanged)."""

    detect: Detector = field(default=lambda text: GuardrailResult.allow())

    async def before_model_request(self, ctx: RunContext[Turn], request_context: Any) -> Any:
        messages = list(request_context.messages)
        last_prompt = max((i for i, m in enumerate(messages) if isinstance(m, ModelRequest)
                           and any(isinstance(p, UserPromptPart) for p in m.parts)), default=-1)
        for i, message in enumerate(messages[:last_prompt]):
            if not isinstance(message, ModelRequest):
                continue
            parts = [self._clean(p) for p in message.parts]
            if any(a is not b for a, b in zip(parts, message.parts, strict=True)):
                messages[i] = replace(message, parts=parts)
        return replace(request_context, messages=messages)

    def _clean(self, part: Any) -> Any:
        if not isinstance(part, UserPromptPart):
            return part
        if isinstance(part.content, str):
            text = self._text(part.content)
            return part if text is part.content else replace(part, content=text)
        content = [self._text(item) if _words(item) else item for item in part.content]
        return part if all(a is b for a, b in zip(content, part.content, strict=True)) else replace(part, content=content)

    def _text(self, text: Any) -> Any:
        verdict = self.detect(text)
        return verdict.replacement if verdict.action == "replace" and isinstance(verdict.replacement, str) else text


@dataclass
class _ScreenedText(AbstractCapability[Turn]):
    """Hold a response's text until it is whole, then show it screened (redacted, or not at all if blocked)."""

    detect: Detector = field(default=lambda text: GuardrailResult.allow())

    async def wrap_run_event_stream(self, ctx: RunContext[Turn], *, stream: AsyncIterable[Any]) -> AsyncIterable[Any]:
        held: list[str] = []
        async for event in stream:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                held.append(event.part.content)
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                held.append(event.delta.content_delta)
            elif isinstance(event, PartEndEvent) and isinstance(event.part, TextPart):
                continue
            else:
                yield event
        text = "".join(held)
        if text:
            verdict = self.detect(text)
            if verdict.action == "block":
                return  # the output guard ends the run; nothing of it is shown
            shown = verdict.replacement if verdict.action == "replace" else text
            yield PartStartEvent(index=0, part=TextPart(content=str(shown)))


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    config = ctx.config
    assert isinstance(config, GuardrailsConfig)
    parts: list[AbstractCapability[Any]] = []
    detect_in = _detector(config, "in", "the person's message")
    if detect_in is not None:
        parts.append(_PromptGuardrail(guard=_raising_input(detect_in)))
        secrets, pii, _ = config.edge("in")
        if secrets or pii:
            parts.append(_EarlierPrompts(detect=_chain(_redactors(secrets, pii))))
    detect_out = _detector(config, "out", "the answer")
    if detect_out is not None:
        parts.append(OutputGuardrail(guard=detectors.for_text(detect_out, on_other="allow")))
        parts.append(_ScreenedText(detect=detect_out))
    detect_tool = _detector(config, "tool", "a tool result")
    if detect_tool is not None:
        parts.append(ToolGuardrail(result_guard=_tool_result_guard(detect_tool)))
    if not parts:
        return None  # enabled with no edge configured: attaches nothing
    return CombinedCapability(parts)


register(CapabilityDecl(
    id="guardrails", name="Guardrails", category="utility", tools=(), build=build, config_model=GuardrailsConfig,
    # The guards are the config's detectors and keep nothing between calls (the held-back text is one stream's
    # local, a redaction is written into the run's own messages). In the shared Agent they sit outside the run's
    # capabilities: the harness's guards keep their declared places (input and tool-result innermost, so a
    # return is screened before tool_output_limits spills it; output outermost), and the request-only
    # redaction of earlier prompts now comes before a run's compaction or reminders see the request.
    shared=True,
    description="Redacts secrets and personal data, or ends the run on a blocked term, in the person's message, "
                "the answer, and what a tool returned (before the model reads it).",
))
