"""Approvals under kill -9: every parked call still decidable, resumed once, its tool run once.

Slack threads and web conversations whose agent calls a gated tool, while the daemon is
SIGKILLed at random moments and started again; half the cards decided at once (the resumed runs
are killed too), the rest after the stream. bench/chaos.py runs it longer and counts it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .harness import Tally, world
from .parked import approvals_under_kills, database_after_drain


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
async def test_parked_approvals_survive_sigkill_and_resume_once(tmp_path: Path, store: str) -> None:
    async with world(tmp_path / "config", store, gated=True) as w:
        tally = Tally(store)
        await approvals_under_kills(w, tally, slack_lanes=3, web_lanes=3, duration=20, every=(1.5, 3.0),
                                    min_kills=3, wait=120)
        db = await database_after_drain(w)
    log = w.daemon.log()
    assert tally.kills >= 3, tally
    assert tally.parked >= 6, tally
    assert (tally.lost, tally.duplicated, tally.wrong, tally.problems) == (0, 0, 0, []), f"{tally}\n{log[-6000:]}"
    assert tally.resumed == tally.parked == tally.admitted == tally.sent, tally
    # Nothing left running, queued or parked; every message answered by its own finished run.
    assert db["runs"] == {"finished": tally.parked}, db
    assert (db["orphan_messages"], db["empty_runs"]) == (0, 0), db
    assert db["ledger"].get("web") == db["users"].get("web"), db
    assert "Traceback" not in log, log[-6000:]
