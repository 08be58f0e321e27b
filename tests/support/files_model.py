"""A scripted model for the attachment tests: answers "Got it." and keeps what it was sent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelRequest, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
CSV = b"region,revenue\nnorth,120\nsouth,95\n"


class Recorder:
    """A FunctionModel that answers "Got it." and keeps the user prompt parts of every request."""

    def __init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []

    def model(self, profile: ModelProfile | None = None) -> FunctionModel:
        async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
            self.requests.append(messages)
            yield "Got it."

        return FunctionModel(stream_function=stream, profile=profile)

    def last_prompt(self, call: int = -1) -> list[Any]:
        """The newest user prompt's content as a list (a plain prompt is one string)."""
        parts = [p for m in self.requests[call] if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, UserPromptPart)]
        content = parts[-1].content
        return [content] if isinstance(content, str) else list(content)
