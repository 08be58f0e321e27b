"""What the core puts around every tool call of every run, as the one capability of ours a shared Agent carries.

Two things: the extensions' toolset wrappers (`Runner.tool_wrappers`: the approval gate,
`capabilities/approval_gate.py`, handed over by `capabilities.extension`, so the core imports nothing
of it), and the slow-call report (`SlowCalls`). One capability rather than a capability each: pydantic-ai
dispatches every hook of every capability and passes every event of the stream through one async
generator per capability, about 800 function calls a run each whether it overrides them or not
(bench/README.md, Round 8). Neither holds anything of a run (each reads the run's Turn from `ctx.deps`),
so it sits in the shared Agent's constructor (`Runner._agent_for`), first, and a run of an agent with
no tools brings no capability of its own. Such a run, offering no tool, goes through the same Agent
without it until its caller brings something that can call one (`TurnAgent`; Round 12).

First of the Agent's capabilities, and the Agent's come before any run's in pydantic-ai's dispatch
order, so the wrappers sit outside every toolset of every run (capabilities', channel tools, MCP
servers', renames, a caller's run capabilities such as a background delegate's inbox) and see the
names the model called. Only pydantic-ai's `position='outermost'` tier sits outside them: its tool
search (which answers `search_tools` itself and hands every other call on by name) and its
pending-message drain (no toolset), as when the gate was each run's own capability.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pydantic_ai.toolsets import AbstractToolset

from gateway.runs.slow_calls import SlowCalls
from gateway.runs.turn import Turn

# A wrapper every call of every run goes through (the approval gate): the toolset it wraps → the wrapper.
ToolsetWrapper = Callable[[AbstractToolset[Turn]], AbstractToolset[Turn]]


@dataclass
class ToolCalls(SlowCalls):
    """The slow-call report, and `wrappers` around the run's whole toolset, the first outermost."""

    wrappers: Sequence[ToolsetWrapper] = ()

    def get_wrapper_toolset(self, toolset: AbstractToolset[Turn]) -> AbstractToolset[Turn] | None:
        if not self.wrappers:
            return None
        for wrap in reversed(self.wrappers):
            toolset = wrap(toolset)
        return toolset
