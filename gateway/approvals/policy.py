"""Whether one tool call needs a person's consent. Pure, and keyed on the tool's stable id.

The model sees a tool under whatever name `tool_overrides` gives it; the gate never looks at
that name, only at the stable id the capability declared, so renaming a gated tool can never
ungate it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

# Names every model provider accepts for a tool: what a visible name in the gate's map (`Turn.tools`) may be.
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

Setting = Literal["default", "required", "never"]
McpPermission = Literal["allow", "ask", "deny"]


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """What the gate knows about one tool offered in a run."""

    stable_id: str
    capability: str
    side_effecting: bool = False
    from_mcp: bool = False
    approval: Setting = "default"  # the capability entry's `approval`
    tool_approval: Setting = "default"  # the entry's `tool_approval[stable_id]`
    mcp_permission: McpPermission | None = None  # the agent file's `tools:` for an MCP tool


@dataclass(frozen=True, slots=True)
class Modes:
    """What people switched on for one conversation from the chat."""

    approve_all: bool = False  # waive gated calls in this conversation
    ask_every_tool: bool = False  # gate every tool, MCP included


def needs_approval(tool: ToolInfo | None, modes: Modes = Modes()) -> bool:
    """True when the call must wait for a decision.

    Order: "ask for every tool" > "approve all" > tool_approval > approval > MCP permission
    (MCP defaults to ask) > the capability's side-effecting flag. A tool the run does not
    know (None) is gated: unknown is never unattended.
    """
    if modes.ask_every_tool:
        return True
    if tool is None:
        return not modes.approve_all
    if modes.approve_all:
        return False
    for setting in (tool.tool_approval, tool.approval):
        if setting == "required":
            return True
        if setting == "never":
            return False
    if tool.from_mcp:
        return (tool.mcp_permission or "ask") == "ask"
    return tool.side_effecting
