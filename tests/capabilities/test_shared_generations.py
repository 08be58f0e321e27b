"""Capabilities built once per config generation (`CapabilityDecl.shared`) while runs are in flight: across a
reload a run keeps its own generation's, and the first run after it is built from the new one, never from a
shared build the old generation left behind (a stale one would skip an approval the admin just required);
a run stopped mid-way leaves nothing of its own in the shared capability for the run beside it.
"""

from __future__ import annotations

import asyncio

import pytest
from pathlib import Path
from typing import Any

from pydantic_ai import CancellationToken, DeferredToolRequests
from pydantic_ai.exceptions import RunCancelled

from gateway.runs.agent_run import run_agent
from gateway.runs.runner import TurnAgent
from gateway.store import repo

from ..conftest import dump_yaml
from . import interleaved
from .interleaved import step
from .support import agent, world
from .test_shared_capabilities import ALICE, BOB, DM_ALICE, DM_BOB, _handle, _reading, _reminders


def _generation(line: str, **python: Any) -> dict[str, Any]:
    """The agent file of one generation: run_python (with `python`'s entry settings) and a reminder on every request."""
    return agent({"id": "code_execution", **python},
                 {"id": "system_reminders", "config": {"reminders": [{"text": line, "interval": 1}]}},
                 model="interleaved")


async def test_a_reload_while_a_run_is_in_flight_keeps_its_generation_and_the_next_run_gets_the_new(
        tmp_path: Path) -> None:
    """Alice's run is mid-way when a reload changes the agent's reminder and makes run_python need approval:
    her run goes on with her generation's reminder only, and Bob's run, started after the reload, is reminded
    of the new line only and his run_python call parks instead of running."""
    alice_asked, bob_done = asyncio.Event(), asyncio.Event()
    interleaved.script({
        "alice": [step("run_python", signal=alice_asked, after=bob_done, code="print('alice-ran')"), step(None)],
        "bob": [step("run_python", code="print('bob-ran')"), step(None)],
    })
    async with world(tmp_path, agents={"assistant": _generation("GEN-ONE")}) as w:
        alice = await w.turn(ALICE, DM_ALICE, "alice")
        alice_agent = w.gw.runner.build_agent(alice)
        assert isinstance(alice_agent, TurnAgent) and alice_agent._capabilities == [], "both are the shared Agent's"
        in_flight = asyncio.create_task(run_agent(alice_agent, "alice", deps=alice))
        await asyncio.wait_for(alice_asked.wait(), 30)

        (w.gw.config.directory / "agents" / "assistant.yaml").write_text(dump_yaml(
            _generation("GEN-TWO", tool_approval={"run_python": "required"})))
        ok, problems = await w.gw.reload_from_disk()
        assert ok, problems

        bob = await w.turn(BOB, DM_BOB, "bob")
        bob_agent = w.gw.runner.build_agent(bob)
        parked = await asyncio.wait_for(run_agent(bob_agent, "bob", deps=bob), 30)
        await w.gw.store.end_run(bob.run_id, repo.FINISHED, reply=str(parked.output))
        bob_done.set()
        finished = await asyncio.wait_for(in_flight, 30)
        await w.gw.store.end_run(alice.run_id, repo.FINISHED, reply=str(finished.output))

    assert isinstance(parked.output, DeferredToolRequests), f"Bob's call ran without approval: {parked.output}"
    assert [c.tool_name for c in parked.output.approvals] == ["run_python"]
    assert "bob-ran" not in "\n".join(interleaved.SHOWN["bob"]), "nothing ran before a person decided"
    assert "GEN-TWO" in _reminders("bob") and "GEN-ONE" not in _reminders("bob"), _reminders("bob")
    assert str(finished.output) == "done" and len(interleaved.SENT["alice"]) == 2
    assert "GEN-ONE" in _reminders("alice") and "GEN-TWO" not in _reminders("alice"), _reminders("alice")


async def test_a_run_stopped_mid_way_keeps_none_of_its_spills_and_the_run_beside_it_reads_only_its_own(
        tmp_path: Path) -> None:
    """tool_output_limits is built once: Alice's run spills a large result and is stopped while its model is
    thinking; her spill is gone with her run, and Bob's run, mid-way beside hers, reads his own spill back
    and nothing under her handle."""
    alice_spilled, bob_spilled, alice_stopped, never = (asyncio.Event() for _ in range(4))
    big = "print('\\n'.join('{}-line-%d' % i for i in range(3000)))"
    interleaved.script({
        "alice": [step("run_python", code=big.format("alice")), step(None, signal=alice_spilled, after=never)],
        "bob": [step("run_python", after=alice_spilled, code=big.format("bob")),
                _reading("bob", "alice", "alice", signal=bob_spilled, after=alice_stopped),
                _reading("bob", "bob", "bob-line-600"), step(None)],
    })
    limits = agent({"id": "code_execution"}, {"id": "tool_output_limits"}, model="interleaved")
    async with world(tmp_path, agents={"assistant": limits}) as w:
        state = w.gw.store.capability_state
        alice, bob = await w.turn(ALICE, DM_ALICE, "alice"), await w.turn(BOB, DM_BOB, "bob")
        token = CancellationToken()
        stopped = asyncio.create_task(run_agent(w.gw.runner.build_agent(alice), "alice", deps=alice,
                                                cancellation_token=token))
        beside = asyncio.create_task(run_agent(w.gw.runner.build_agent(bob), "bob", deps=bob))
        await asyncio.wait_for(bob_spilled.wait(), 30)
        assert await state.get("tool_output_limits", alice.run_id, _handle("alice")) is not None, "Alice spilled"
        token.cancel()
        with pytest.raises(RunCancelled):
            await asyncio.wait_for(stopped, 30)
        left = await state.get("tool_output_limits", alice.run_id, _handle("alice"))
        alice_stopped.set()
        finished = await asyncio.wait_for(beside, 30)
        await w.gw.store.end_run(bob.run_id, repo.FINISHED, reply=str(finished.output))
        bobs = await state.get("tool_output_limits", bob.run_id, _handle("bob"))
    assert left is None, "a stopped run's spill outlived it"
    shown = [t for t in interleaved.SHOWN["bob"] if not t.startswith("You are a test agent.")]
    assert "No stored tool result" in shown[-2] and "alice-line" not in "\n".join(shown), shown[-2]
    assert "bob-line-600" in shown[-1], shown[-1]
    assert str(finished.output) == "done" and bobs is None
