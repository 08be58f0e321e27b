"""Which of an MCP server's tools a run offers, under what name and permission.

One answer for the two that ask: the `mcp_servers` capability (what the model is offered) and
`agent-gateway mcp list` (what the admin is shown), so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bindings.models import McpPermission, McpServerSpec
from gateway.approvals.policy import TOOL_NAME


@dataclass(frozen=True)
class OfferedTool:
    server_name: str  # as the server names it
    visible: str  # as the model sees it
    permission: McpPermission
    note: str = ""  # why it is not offered, when it is not


def visible_tools(spec: McpServerSpec, tools: Iterable[Any], *, handshake: bool = False) -> list[OfferedTool]:
    """Every tool the server lists, with the name and permission it resolves to.

    A tool the server runs only as a task (`execution.taskSupport: required`) is not offered on a
    handshake-era session: the client there has no task path, so every call would fail. (A 2026-07-28
    session drives a task to its result on an ordinary call.)
    """
    rows = []
    for tool in tools:
        permission = spec.permission(tool.name)
        visible = f"{spec.name}_{tool.name}"
        note = ""
        if permission == "deny":
            note = "never offered"
        elif not TOOL_NAME.match(visible):
            note = "not offered: not a name every model provider accepts (letters, digits, '_', '-', at most 64)"
        elif handshake and getattr(getattr(tool, "execution", None), "task_support", None) == "required":
            note = "not offered: the server runs it only as a task, which this protocol revision cannot drive"
        rows.append(OfferedTool(tool.name, visible, permission, note))
    return rows
