"""A server's sampling requests, answered with the agent's own model (where `sampling: allow`) and
counted in the usage of the run whose tool call the server is serving: the model's requests and
tokens for it are the run's, like its own. A request that comes while no run's call, or several,
are in flight on the connection is answered but counted in no run (the protocol does not say which
call it belongs to).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings

from gateway.mcp.call import RunCall


class CountedModel(WrapperModel):
    """The agent's model, adding each request's usage to the run whose call is in flight."""

    def __init__(self, wrapped: Any, current: Callable[[], RunCall | None]) -> None:
        super().__init__(wrapped)
        self._current = current

    async def request(self, messages: list[ModelMessage], model_settings: ModelSettings | None,
                      model_request_parameters: ModelRequestParameters) -> ModelResponse:
        response = await super().request(messages, model_settings, model_request_parameters)
        call = self._current()
        if call is not None and call.usage is not None:
            call.usage.requests += 1
            call.usage.incr(response.usage)
        return response
