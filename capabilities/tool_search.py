"""tool_search: the agent's MCP tools are found by search instead of carried on every request.

The search is pydantic-ai's own `ToolSearch` (native on providers that offer it, the local
`search_tools` function elsewhere). Binding this capability is what defers the MCP toolsets: the
capability and the deferral are one decision, since the library's search is inert with nothing
deferred and a deferred tool nobody can search for is a tool the model can never call.

Which tools are deferred is read from the run's gate map (`Turn.tools`): every tool that came from
an MCP server (`from_mcp`), by the name the model sees. The registry's own tools stay visible. The
deferral wraps the run's whole toolset inside the search, after renames and the MCP prefix were
applied, so a discovered tool arrives under its real visible name and the approval gate, which is
keyed on that name, still pairs on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_ai.capabilities import AbstractCapability, ToolSearch
from pydantic_ai.tools import RunContext, ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, PreparedToolset

from gateway.approvals.policy import ToolInfo
from gateway.runs.turn import Turn

from .registry import BuildContext, CapabilityDecl, register

SEARCH_TOOL = ToolSearch.function_tool_name  # "search_tools", when the search runs on our side


class ToolSearchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy: Literal["auto", "keywords", "bm25", "regex"] = Field(
        default="auto", description="auto: the provider's native search where it has one, local keywords elsewhere; "
                                    "keywords: always local; bm25 / regex: Anthropic's native search only (a run on "
                                    "another provider fails rather than substituting)")
    max_results: int = Field(default=10, ge=1, le=50, description="matches one search returns (ignored by native "
                                                                  "search)")


async def _defer_mcp(ctx: RunContext[Turn], tool_defs: list[ToolDefinition]) -> list[ToolDefinition]:
    """Mark the run's MCP tools (by visible name, from the gate's map) for deferred loading."""
    def from_mcp(name: str) -> bool:
        info = ctx.deps.tools.get(name)
        return info is not None and info.from_mcp

    return [replace(t, defer_loading=True) if from_mcp(t.name) else t for t in tool_defs]


@dataclass
class McpToolSearch(ToolSearch[Turn]):
    """pydantic-ai's ToolSearch over a toolset whose MCP tools are deferred.

    It holds nothing of a run (the gate's map is the run's deps), so the runner puts it in the shared
    Agent's constructor, keyed by its configuration (`Runner.build_agent`)."""

    def get_wrapper_toolset(self, toolset: AbstractToolset[Turn]) -> AbstractToolset[Turn]:
        return super().get_wrapper_toolset(PreparedToolset(toolset, _defer_mcp))


def build(ctx: BuildContext) -> AbstractCapability[Any]:
    config = ctx.config
    assert isinstance(config, ToolSearchConfig)
    # The local search function is the capability's own and leaves nothing to approve.
    ctx.turn.tools.setdefault(SEARCH_TOOL, ToolInfo(stable_id=SEARCH_TOOL, capability="tool_search"))
    strategy = None if config.strategy == "auto" else config.strategy
    return McpToolSearch(strategy=strategy, max_results=config.max_results)


register(CapabilityDecl(
    id="tool_search", name="Tool search", category="utility", tools=(), build=build, config_model=ToolSearchConfig,
    # Not `shared`: the runner puts its ToolSearch in the shared Agent itself, keyed by its configuration
    # (`Runner.build_agent`); in a `SharedCapabilities` it would sit beside the plain one pydantic-ai adds.
    description="Defers the agent's MCP tools: the model finds one by search instead of carrying every schema on "
                "every request. The agent's own capabilities stay visible; a found tool keeps its name, approval "
                "and renames.",
))
