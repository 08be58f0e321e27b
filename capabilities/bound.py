"""A built capability with its agent entry's renames, descriptions and denied tools applied, and
instructions read from the run's deps.

Its own module because it is pydantic-ai's (a wrapper capability, a prepared toolset, a run context):
the registry's declarations and config checks import no pydantic-ai, and this is imported when a run
is built (`registry.build_for_turn`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.capabilities.wrapper import WrapperCapability
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, PreparedToolset


@dataclass
class FromDeps(AbstractCapability[Any]):
    """Instructions `read` from the run's Turn (its deps) at each model request, and nothing else.

    A capability built once for every run of an agent (`CapabilityDecl.shared`) reads the run here,
    never from its build. Not a `Capability(instructions=...)`: that contributes an empty function
    toolset, and pydantic-ai walks every toolset beside another through a task group (`for_run`,
    `for_run_step`, `get_tools`: bench/README.md, Round 12). Here because pydantic-ai finds a
    function's run context by its annotation, which must resolve where the function is defined."""

    read: Callable[[Any], str]

    def get_instructions(self) -> Callable[[RunContext[Any]], str]:
        read = self.read

        def instructions(ctx: RunContext[Any]) -> str:
            return read(ctx.deps)
        return instructions


@dataclass
class _Describe:
    """Rewrites descriptions by visible name (PrepareTools may not rename, so renames come first)."""

    descriptions: dict[str, str] = field(default_factory=dict)

    async def __call__(self, ctx: Any, tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
        return [replace(t, description=self.descriptions.get(t.name, t.description)) for t in tool_defs]


@dataclass
class Bound(WrapperCapability[Any]):
    """A built capability with the entry's renames and descriptions applied to its tools.

    A wrapper capability, so the inner capability's hooks (after_tool_execute, wrap_run, ...) still run.
    """

    renames: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)
    hidden: frozenset[str] = frozenset()  # stable ids the binding denies: never offered

    def get_toolset(self) -> Any:
        toolset = self.wrapped.get_toolset()
        if toolset is None or not isinstance(toolset, AbstractToolset):
            return toolset
        if self.hidden:  # before renames, so the filter reads the stable ids
            hidden = self.hidden
            toolset = toolset.filtered(lambda ctx, tool_def: tool_def.name not in hidden)
        if self.renames:
            toolset = toolset.renamed(self.renames)  # {new visible name: stable id}
        if self.descriptions:
            toolset = PreparedToolset(toolset, _Describe(self.descriptions))
        return toolset
