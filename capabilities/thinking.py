"""thinking: ask the model to reason before answering, at an effort level that survives a model swap.

pydantic-ai's unified `thinking` setting maps each level onto the provider's own and picks the
nearest level a provider lacks; unset leaves the provider's default (the capability is not attached).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from pydantic_ai.capabilities import AbstractCapability, Thinking

from .registry import BuildContext, CapabilityDecl, register


class ThinkingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    effort: Literal["minimal", "low", "medium", "high", "xhigh"] | None = None


def build(ctx: BuildContext) -> AbstractCapability[Any] | None:
    assert isinstance(ctx.config, ThinkingConfig)
    if ctx.config.effort is None:
        return None
    return Thinking(effort=ctx.config.effort)


register(CapabilityDecl(
    id="thinking", name="Thinking", category="reasoning", tools=(), build=build, config_model=ThinkingConfig,
    shared=True,  # a model setting of the config alone: no tool, nothing of any run
    description="Asks the model to reason before it answers: slower and dearer, better on multi-step work.",
))
