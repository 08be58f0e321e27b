"""A side-effecting test tool, `delete_branch`, in a capability the platform e2e tests share.

Registered in the real registry, so the real gate, store and resume path run. `RAN` records
what the tool actually did; each test clears it first.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai.tools import Tool

from capabilities.registry import REGISTRY, BuildContext, CapabilityDecl, ToolDecl, register, simple

CAPABILITY = "test_git"
RAN: list[str] = []


def _build(ctx: BuildContext) -> Any:
    async def delete_branch(branch: str) -> str:
        """Delete a git branch."""
        RAN.append(branch)
        return f"deleted {branch}"

    return simple(tools=[Tool(delete_branch, name="delete_branch")])


if CAPABILITY not in REGISTRY:
    register(CapabilityDecl(
        id=CAPABILITY, name="Test git", category="test", build=_build,
        tools=(ToolDecl("delete_branch", side_effecting=True, summary="Delete a branch"),),
    ))
