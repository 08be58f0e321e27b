"""The approval policy table, keyed on stable ids."""

from __future__ import annotations

import pytest

from gateway.approvals.policy import Modes, ToolInfo, needs_approval

READ = ToolInfo("status", "ops", side_effecting=False)
WRITE = ToolInfo("deploy", "ops", side_effecting=True)
MCP = ToolInfo("tracker_create", "mcp:tracker", from_mcp=True)


@pytest.mark.parametrize(
    ("tool", "modes", "gated"),
    [
        (READ, Modes(), False),  # default follows the side-effecting flag
        (WRITE, Modes(), True),
        (ToolInfo("status", "ops", approval="required"), Modes(), True),  # approval on the whole capability
        (ToolInfo("deploy", "ops", side_effecting=True, approval="never"), Modes(), False),
        # tool_approval overrides approval, both ways
        (ToolInfo("deploy", "ops", side_effecting=True, approval="required", tool_approval="never"), Modes(), False),
        (ToolInfo("status", "ops", approval="never", tool_approval="required"), Modes(), True),
        # MCP tools default to ask; allow / ask per tool
        (MCP, Modes(), True),
        (ToolInfo("t", "mcp:x", from_mcp=True, mcp_permission="allow"), Modes(), False),
        (ToolInfo("t", "mcp:x", from_mcp=True, mcp_permission="ask"), Modes(), True),
        (ToolInfo("t", "mcp:x", from_mcp=True, mcp_permission="allow", tool_approval="required"), Modes(), True),
        # conversation modes
        (WRITE, Modes(approve_all=True), False),
        (MCP, Modes(approve_all=True), False),
        (READ, Modes(ask_every_tool=True), True),
        (ToolInfo("t", "mcp:x", from_mcp=True, mcp_permission="allow"), Modes(ask_every_tool=True), True),
        (ToolInfo("status", "ops", approval="never"), Modes(ask_every_tool=True), True),
        # a tool the run cannot identify is never unattended
        (None, Modes(), True),
    ],
)
def test_policy(tool: ToolInfo | None, modes: Modes, gated: bool) -> None:
    assert needs_approval(tool, modes) is gated
