"""The approval gate: a call the policy gates raises `ApprovalRequired`, so the run parks.

A wrapper toolset around the run's whole toolset that holds nothing of a run: the run's Turn is its
deps (`ctx.deps`). `capabilities.extension` hands `gate` to the runner as the first of its
`tool_wrappers`, which the core's one capability in every shared Agent applies outermost
(`gateway/runs/tool_calls.py` says where that sits and why): outside every toolset of every run, so
it sees the names the model called. The policy itself (`gateway.approvals.policy.needs_approval`) is
keyed on the stable ids in `Turn.tools`, so a renamed tool is still gated, and an undeclared one is
gated too. The service that shows cards and takes decisions is `gateway.approvals.service`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

import logging

from gateway.approvals.arguments import APPROVAL_ID, mismatch, parked_metadata
from gateway.approvals.policy import needs_approval
from gateway.runs.delegated import decisions_of
from gateway.runs.turn import Turn


log = logging.getLogger("capabilities.approval_gate")

NOT_THE_APPROVED_ARGUMENTS = ("This call was not run: its arguments are not the ones the person approved (the "
                              "approval was for other arguments). Nothing happened. If it is still needed, call it "
                              "again so they can decide on these arguments.")
ALREADY_STARTED = ("This approved call was already started once, before the gateway restarted, and was not "
                   "started again: it may or may not have completed. Tell the person so; do not call it again "
                   "unless they ask.")


class NoTurn(RuntimeError):
    """A tool was called in a run whose deps are not a Turn: nothing to decide on, so nothing runs."""


@dataclass
class _GateToolset(WrapperToolset[Turn]):
    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: RunContext[Turn], tool: ToolsetTool[Turn]) -> Any:
        turn = ctx.deps
        if not isinstance(turn, Turn):  # fails closed, and not an assert (stripped under -O)
            raise NoTurn(f"tool {name!r} was called in a run without its Turn as deps: not run")
        if ctx.tool_call_approved:
            metadata = ctx.tool_call_metadata
            approval = metadata.get(APPROVAL_ID) if isinstance(metadata, dict) else None
            # A decision is bound to the digest of the arguments the card showed: a call resumed with
            # others (a stored transcript changed, a tool whose schema changed meanwhile) is refused.
            # A `task` call carrying a delegate's decisions is not itself what was decided: the
            # delegate's own gate checks each of its calls the same way.
            if decisions_of(metadata) is None and mismatch(metadata, tool_args):
                log.warning("run %s: approved call %s (approval %s) refused: its arguments differ from the "
                            "ones approved", turn.run_id, name, approval, extra=turn.log_fields)
                return NOT_THE_APPROVED_ARGUMENTS
            # An approved call starts at most once: a process killed after starting it resumes
            # the run again from the same decision, and a side effect a person allowed once must
            # not happen twice. The marker is written before the call, so a crash in between
            # leaves it not run rather than run twice.
            if approval and not await turn.state.add("approvals", "started", str(approval), turn.run_id):
                return ALREADY_STARTED
        elif needs_approval(turn.tools.get(name), await turn.modes()):
            raise ApprovalRequired(metadata=parked_metadata(tool_args))
        return await super().call_tool(name, tool_args, ctx, tool)


def gate(toolset: AbstractToolset[Turn]) -> AbstractToolset[Turn]:
    """`toolset` behind the gate: the runner's first tool wrapper (`Runner.tool_wrappers`)."""
    return _GateToolset(toolset)
