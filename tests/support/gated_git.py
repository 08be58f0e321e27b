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


# The argument issue 29 hid: past the 1,500 characters cards used to keep, the part that matters at the end.
LONG_BRANCH = "staging" + " " * 1600 + "AND-ALSO-PROD"


def asking_to_delete(branch: str) -> Any:
    """A model that asks to delete `branch`, then says what the tool answered."""
    import json
    from collections.abc import AsyncIterator

    from pydantic_ai.messages import ModelMessage, ModelRequest, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            yield {0: DeltaToolCall(name="delete_branch", json_args=json.dumps({"branch": branch}), tool_call_id="call-1")}
            return
        yield f"Result: {str(returns[-1].content)[:40]}"

    return FunctionModel(stream_function=stream)
