"""A server's sampling requests, answered with the agent's own model (where `sampling: allow` or `ask`) and
counted in the usage of the run whose tool call the server is serving: the model's requests and
tokens for it are the run's, like its own. A request that comes while no run's call, or several,
are in flight on the connection is answered but counted in no run (the protocol does not say which
call it belongs to).

Under `sampling: ask` each request is first put to a decider of that run, in its thread
(`gateway/approvals/questions.py`): what the server asks the model, its system prompt and its token
ceiling. The model answers only once that is accepted; a decline, the question's timeout, or a request
with no run to ask in is an error to the server ("... declined"), and no model request is made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from gateway.approvals.questions import Ask
from gateway.mcp.call import RunCall

SHOWN_CHARS = 1500  # of the request's text, on the question card


class SamplingDeclined(Exception):
    """The person did not let the model answer a server's sampling request (the server gets this as its error)."""


class CountedModel(WrapperModel):
    """The agent's model, adding each request's usage to the run whose call is in flight; under `asks`,
    only after a decider of that run has accepted the request."""

    def __init__(self, wrapped: Any, current: Callable[[], RunCall | None], server: str = "", *,
                 asks: bool = False) -> None:
        super().__init__(wrapped)
        self._current, self._server, self._asks = current, server, asks

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        call = self._current()
        if self._asks:
            await self._approved(call, messages, model_settings)
        response = await super().request(messages, model_settings, model_request_parameters)
        if call is not None and call.usage is not None:
            call.usage.requests += 1
            call.usage.incr(response.usage)
        return response

    async def _approved(self, call: RunCall | None, messages: list[ModelMessage],
                        model_settings: ModelSettings | None) -> None:
        if call is None or call.ask is None:
            raise SamplingDeclined("Sampling declined: nobody could be asked to approve this request.")
        answer = await call.ask(Ask(asker=f"The {self._server} MCP server", text=described(messages, model_settings),
                                    accept="Let the model answer", decline="Refuse"))
        if answer.action != "accept":
            raise SamplingDeclined("Sampling declined by the person." if answer.action == "decline"
                                   else "Sampling declined: nobody approved this request in time.")


def described(messages: list[ModelMessage], model_settings: ModelSettings | None) -> str:
    """What a decider is shown: the request's system prompt, what it asks the model, and its token ceiling."""
    system = [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
              if isinstance(p, SystemPromptPart)]
    asked = [p.content if isinstance(p.content, str) else "[non-text content]" for m in messages
             if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]
    text = "\n".join(asked)
    if len(text) > SHOWN_CHARS:
        text = text[:SHOWN_CHARS] + f"… ({len(text) - SHOWN_CHARS} more characters)"
    lines = ["wants this agent's model to answer:", text or "(no text)"]
    if system:
        lines.append("System prompt: " + " ".join(system)[:500])
    lines.append(f"At most {(model_settings or {}).get('max_tokens', 'unlimited')} tokens.")
    return "\n".join(lines)
