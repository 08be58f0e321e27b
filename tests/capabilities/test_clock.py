"""clock: the date and time of the run's own clock in the instructions, read at each model request."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from gateway.clock import ManualClock
from gateway.messages import ChatKind

from .support import Account, Place, agent, world

ALICE = Account("slack", "T1", "U1", "alice")


async def test_each_run_is_told_the_time_of_its_own_request(tmp_path: Path) -> None:
    """Built once for every run of the agent (it is in the shared Agent), the line is still each run's now."""
    clock = ManualClock(datetime(2026, 1, 5, 9, 30, tzinfo=timezone.utc))
    agents = {"assistant": agent({"id": "clock", "config": {"timezone": "Europe/Warsaw"}})}
    async with world(tmp_path, agents=agents, clock=clock) as w:
        seen = await w.run(ALICE, Place("slack", "slack", "T1", "D1", ChatKind.DM), "hello")
        assert "Monday, 05 January 2026, 10:30 (Europe/Warsaw)" in seen.instructions[0]
        clock.advance(86_400 + 15 * 60)
        seen = await w.run(ALICE, Place("slack", "slack", "T1", "D2", ChatKind.DM), "hello")
        assert "Tuesday, 06 January 2026, 10:45 (Europe/Warsaw)" in seen.instructions[0]
