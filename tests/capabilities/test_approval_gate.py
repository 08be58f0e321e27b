"""The approval gate in the shared Agent's constructor: a plain agent's run carries no capability of its
own, and the gate still sees every call of every run under the name the model used, a caller's run
capabilities (a background delegate's inbox is one) included."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pydantic_ai import DeferredToolRequests
from pydantic_ai.capabilities import AbstractCapability, Capability
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from capabilities.approval_gate import NoTurn, gate
from gateway.messages import ChatKind, Sender
from gateway.outbound.adapter import Decision
from gateway.runs.agent_run import run_agent
from gateway.runs.runner import TurnAgent
from gateway.runs.tool_calls import ToolCalls
from gateway.runs.turn import Turn
from gateway.store import repo

from ..conftest import wait_for
from .shaping_script import SCRIPT, call, say
from .support import Account, Place, World, agent, slack_binding, telegram_binding, world

ALICE = Account("slack", "T1", "U1", "alice")
DM = Place("slack", "slack", "T1", "D1", ChatKind.DM)


@dataclass
class _Renames(AbstractCapability[Turn]):
    """A run capability that renames at the wrapper level: outside every toolset of the run but the gate's."""

    renames: dict[str, str]

    def get_wrapper_toolset(self, toolset: AbstractToolset[Turn]) -> AbstractToolset[Turn]:
        return toolset.renamed(self.renames)


async def _run(w: World, text: str, capabilities: list[Any]) -> tuple[Turn, Any]:
    turn = await w.turn(ALICE, DM, text)
    result = await run_agent(w.gw.runner.build_agent(turn), text, deps=turn, capabilities=capabilities)
    await w.gw.store.end_run(turn.run_id, repo.FINISHED, reply=str(result.output))
    return turn, result.output


async def test_a_plain_agents_run_has_no_capability_and_an_agent_with_tools_has_the_gate_first(tmp_path: Path) -> None:
    agents = {"assistant": agent(model="shaping-scripted"), "noted": agent({"id": "memory_files"}, model="shaping-scripted")}
    bindings = {"slack": slack_binding(), "telegram": telegram_binding("noted")}
    async with world(tmp_path, agents=agents, bindings=bindings) as w:
        plain = w.gw.runner.build_agent(await w.turn(ALICE, DM, "hello"))
        assert isinstance(plain, TurnAgent)
        assert plain._capabilities == [], "a tool-less run of a plain agent brings no per-run capability"
        # Nothing of it can call a tool: pydantic-ai need not dispatch the gate's and slow-call report's hooks.
        assert not any(isinstance(c, ToolCalls) for c in plain.wrapped.root_capability.capabilities)

        noted = w.gw.runner.build_agent(await w.turn(ALICE, Place("telegram", "telegram", "", "42", ChatKind.DM), "hi"))
        # memory_files holds nothing of a run: built once, it is in the shared Agent, inside the gate.
        assert isinstance(noted, TurnAgent) and noted._capabilities == []
        capabilities = list(noted.wrapped.root_capability.capabilities)
        order = [type(c).__name__ for c in capabilities]
        assert order.index("ToolCalls") < order.index("Capability"), order
        # Only pydantic-ai's outermost tier before ours: its tool search, which answers search_tools itself and
        # hands every other call on by name, and its pending-message drain, which wraps no toolset.
        assert set(order[:order.index("ToolCalls")]) <= {"ToolSearch", "PendingMessageDrainCapability"}, order
        calls = capabilities[order.index("ToolCalls")]
        assert isinstance(calls, ToolCalls) and calls.wrappers[0] is gate, "the gate is the outermost wrapper"


def _launcher() -> tuple[list[str], Callable[[str], str]]:
    """A tool no capability declares, and the targets it was run with."""
    ran: list[str] = []

    def launch(target: str) -> str:
        """Launch something.

        Args:
            target: what.
        """
        ran.append(target)
        return "launched"

    return ran, launch


@pytest.mark.parametrize("capabilities", [[{"id": "memory_files"}], []], ids=["with tools", "plain"])
async def test_a_tool_a_callers_run_capability_brings_is_gated(tmp_path: Path, capabilities: list[Any]) -> None:
    """A plain agent's run goes through the Agent without the gate (it has no tool) until a caller brings one."""
    ran, launch = _launcher()

    async with world(tmp_path, agents={"assistant": agent(*capabilities, model="shaping-scripted")}) as w:
        SCRIPT.reset(call("launch", target="moon"))
        turn, output = await _run(w, "launch it", [Capability(toolsets=[FunctionToolset([launch])])])
        assert "launch" not in turn.tools, "a tool no capability declared"
        assert isinstance(output, DeferredToolRequests), output
        assert [c.tool_name for c in output.approvals] == ["launch"]
        assert ran == [], "nothing runs before a person decides"


async def test_the_gate_sees_the_name_a_run_capabilitys_wrapper_gave_a_tool(tmp_path: Path) -> None:
    async with world(tmp_path, agents={"assistant": agent({"id": "memory_files"}, model="shaping-scripted")}) as w:
        # list_memory is declared and needs no approval: called by its own name it runs.
        SCRIPT.reset(call("list_memory"))
        turn, output = await _run(w, "list", [])
        assert turn.tools["list_memory"].stable_id == "list_memory"
        assert output == "done" and not isinstance(output, DeferredToolRequests)
        # Renamed outside the capabilities' toolsets, the gate meets the name the model called, which no
        # capability declared: gated. A gate inside the rename would have seen list_memory and run it.
        SCRIPT.reset(call("peek"))
        turn, output = await _run(w, "peek", [_Renames({"peek": "list_memory"})])
        assert "peek" not in turn.tools
        assert isinstance(output, DeferredToolRequests), output
        assert [c.tool_name for c in output.approvals] == ["peek"]
        assert SCRIPT.requests[-1].tools.keys() >= {"peek"} and "list_memory" not in SCRIPT.requests[-1].tools


async def test_a_shared_capabilitys_tools_are_gated_by_its_entry_as_a_runs_own_were(tmp_path: Path) -> None:
    """memory_files is built once and held by the shared Agent (the shipped agent's shape): its entry's
    `tool_approval` and renames still decide each run's calls, and a binding's denied tool is not offered."""
    entry = {"id": "memory_files", "tool_approval": {"delete_memory": "required"},
             "tool_overrides": {"delete_memory": {"name": "forget"}}}
    bindings = {"slack": slack_binding(), "telegram": telegram_binding(deny_tools=["write_memory"])}
    async with world(tmp_path, agents={"assistant": agent({"id": "clock"}, entry, model="shaping-scripted")},
                     bindings=bindings) as w:
        SCRIPT.reset(call("write_memory", name="a.md", content="kept"))
        turn, output = await _run(w, "write", [])
        assert output == "done" and turn.tools["forget"].stable_id == "delete_memory"
        SCRIPT.reset(call("forget", name="a.md"))
        turn, output = await _run(w, "forget it", [])
        assert isinstance(output, DeferredToolRequests), output
        assert [c.tool_name for c in output.approvals] == ["forget"]
        SCRIPT.reset(call("read_memory", name="a.md"))
        await _run(w, "read", [])
        assert "kept" in str(SCRIPT.requests[-1].messages[-1]), "nothing was deleted before a person decided"

        # The daemon's way: the card, a click, and the resumed run deletes the note once.
        SCRIPT.reset(call("forget", name="a.md"))
        await w.say(ALICE, DM, "forget it")
        await wait_for(lambda: w.adapter("slack").cards, what="the approval card")
        [card] = w.adapter("slack").cards
        [item] = card.items
        assert item.tool_name == "forget" and item.capability == "memory_files"
        SCRIPT.reset(say("forgotten"))
        outcome = await w.gw.approvals.decide(item.approval_id, Decision.APPROVE, Sender("U1", "alice"),
                                              binding_id="slack", surface="slack")
        assert outcome.accepted, outcome

        async def finished() -> bool:
            run = await w.gw.store.run(card.run_id)
            return run is not None and run.status == repo.FINISHED

        await wait_for(finished, what="the resumed run")
        assert SCRIPT.requests[0].tool_results()[0].startswith("Deleted a.md")

        elsewhere = await w.turn(ALICE, Place("telegram", "telegram", "", "42", ChatKind.DM), "hi")
        SCRIPT.reset(call("write_memory", name="b.md", content="x"))
        result = await run_agent(w.gw.runner.build_agent(elsewhere), "hi", deps=elsewhere)
        await w.gw.store.end_run(elsewhere.run_id, repo.FINISHED, reply=str(result.output))
        assert "write_memory" not in elsewhere.tools and "write_memory" not in SCRIPT.requests[0].tools
        assert "Created" not in str(SCRIPT.requests[-1].messages[-1]), "a denied tool called anyway does not run"


async def test_a_tool_called_in_a_run_without_its_turn_is_not_run(tmp_path: Path) -> None:
    ran, launch = _launcher()

    async with world(tmp_path, agents={"assistant": agent(model="shaping-scripted")}) as w:
        turn = await w.turn(ALICE, DM, "launch it")
        SCRIPT.reset(call("launch", target="moon"))
        with pytest.raises(NoTurn):
            await run_agent(w.gw.runner.build_agent(turn), "launch it", deps=None,
                            capabilities=[Capability(toolsets=[FunctionToolset([launch])])])
        assert ran == []
        await w.gw.store.end_run(turn.run_id, repo.FAILED, reason="test")
